//! The state of one datum as the catalogue holds it ([`Slot`]: a field, or removed by a
//! tombstone) and the count of dead fields and bytes that commits and merges leave behind
//! ([`Dead`]). Shared by the overlay, the runs and the merge; imports no other catalogue file.

use std::collections::HashMap;

use crate::format::DataRef;

/// A datum's state: a field, or removed by a tombstone (`None`).
pub(crate) type Slot = Option<DataRef>;

/// Dead (masked or removed) fields and bytes, in total and per data object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Dead {
    pub(crate) fields: u64,
    pub(crate) bytes: u64,
    pub(crate) by_object: HashMap<u64, u64>,
}

impl Dead {
    pub(crate) fn kill(&mut self, old: &DataRef) {
        self.fields += 1;
        self.bytes += old.length;
        *self.by_object.entry(old.object).or_default() += old.length;
    }

    pub(crate) fn add(&mut self, other: &Dead) {
        self.fields += other.fields;
        self.bytes += other.bytes;
        for (o, b) in &other.by_object {
            *self.by_object.entry(*o).or_default() += b;
        }
    }
}
