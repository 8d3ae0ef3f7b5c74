//! FDB5's public C API (`fdb5/api/fdb_c.h`, 5.25) over haar.
