//! Where the fields of a synthetic run live in the MARS key space ([`Layout`]): keys, requests
//! and product keys of `haar hammer` and `haar workflow`, and the refusal of impossible shapes.
//!
//! Pure: owns key and request construction; must not touch stores or processes.

use haar_core::Key;
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::field;

/// Where the fields of a synthetic run live in the MARS key space: an ensemble forecast
/// (`stream=enfo`, `type=pf`, one `number` per member) on model levels, like fdb-hammer's.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Layout {
    /// MARS class (`od`, `rd`, …).
    pub class: String,
    /// Experiment version, 4 characters.
    pub expver: String,
    /// Forecast base date `YYYYMMDD`.
    pub date: String,
    /// Forecast base time `HHMM`.
    pub time: String,
    /// Members (`number=1..=members`).
    pub members: u32,
    /// Output steps (`step=0, h, 2h, …`).
    pub steps: u32,
    /// Hours between output steps.
    pub step_hours: u32,
    /// Model levels (`levelist=1..=levels`).
    pub levels: u32,
    /// Parameters per level (the first of [`PARAMS`]).
    pub params: u32,
    /// Bytes per field.
    pub field_size: usize,
}

/// Model-level parameters, as paramIds: t, u, v, q, w, vo, d, z, o3, clwc, ciwc, cc.
pub const PARAMS: [u32; 12] = [130, 131, 132, 133, 135, 138, 155, 129, 203, 246, 247, 248];

impl Layout {
    /// Fields per member per step.
    pub fn fields_per_step(&self) -> u32 {
        self.levels * self.params
    }

    /// Every field of the run.
    pub fn total_fields(&self) -> u64 {
        u64::from(self.members) * u64::from(self.steps) * u64::from(self.fields_per_step())
    }

    /// Bytes of every field of the run.
    pub fn total_bytes(&self) -> u64 {
        self.total_fields() * self.field_size as u64
    }

    /// `(param, level)` of field index `f` (level-major: all params of level 1 first).
    pub fn field(&self, f: u32) -> (u32, u32) {
        (PARAMS[(f % self.params) as usize], f / self.params + 1)
    }

    /// The field index of `(param, level)`, if the layout has it.
    pub fn field_index(&self, param: u32, level: u32) -> Option<u32> {
        let p = PARAMS[..self.params as usize]
            .iter()
            .position(|&x| x == param)? as u32;
        (1..=self.levels)
            .contains(&level)
            .then(|| (level - 1) * self.params + p)
    }

    /// The header of member `m`'s field `f` at step index `s`: values `reference + scale·X`,
    /// `X` from a body with `seed` whose CRC is `crc`.
    #[allow(clippy::too_many_arguments)]
    pub fn member_header(
        &self,
        m: u32,
        s: u32,
        f: u32,
        reference: f64,
        scale: f64,
        seed: u64,
        crc: u32,
    ) -> field::Header {
        let (param, level) = self.field(f);
        field::Header {
            bits: 16,
            member: m,
            step: s,
            param,
            level,
            reference,
            scale,
            nvalues: field::nvalues16(self.field_size),
            kind: field::Kind::Member,
            seed,
            body_crc: crc,
        }
    }

    /// The `step` value of step index `s`.
    pub fn step_value(&self, s: u32) -> u32 {
        s * self.step_hours
    }

    /// The database and index part shared by every field of the run.
    fn base(&self, kind: &str) -> Key {
        Key::new()
            .with("class", self.class.clone())
            .with("expver", self.expver.clone())
            .with("stream", "enfo")
            .with("date", self.date.clone())
            .with("time", self.time.clone())
            .with("domain", "g")
            .with("type", kind)
            .with("levtype", "ml")
    }

    /// The key of member `m`'s field `f` at step index `s`.
    pub fn key(&self, m: u32, s: u32, f: u32) -> Key {
        let (param, level) = self.field(f);
        self.base("pf")
            .with("step", self.step_value(s).to_string())
            .with("number", m.to_string())
            .with("levelist", level.to_string())
            .with("param", param.to_string())
    }

    /// The key of a product (`em` ensemble mean, `es` ensemble standard deviation).
    pub fn product_key(&self, kind: &str, s: u32, f: u32) -> Key {
        let (param, level) = self.field(f);
        self.base(kind)
            .with("step", self.step_value(s).to_string())
            .with("levelist", level.to_string())
            .with("param", param.to_string())
    }

    /// A MARS request for `type` at step index `s`: every member (for `pf`), every level and
    /// parameter unless narrowed to field `f`.
    pub fn request(&self, kind: &str, s: u32, f: Option<u32>) -> String {
        let (levels, params) = match f {
            Some(f) => {
                let (p, l) = self.field(f);
                (l.to_string(), p.to_string())
            }
            None => (
                format!("1/to/{}", self.levels),
                PARAMS[..self.params as usize]
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join("/"),
            ),
        };
        let number = if kind == "pf" {
            format!(",number=1/to/{}", self.members)
        } else {
            String::new()
        };
        format!(
            "class={},expver={},stream=enfo,date={},time={},domain=g,type={kind},levtype=ml,step={}{number},levelist={levels},param={params}",
            self.class,
            self.expver,
            self.date,
            self.time,
            self.step_value(s),
        )
    }

    /// A MARS request for every member field of every step.
    pub fn request_all_steps(&self) -> String {
        let first = self.request("pf", 0, None);
        let steps = (0..self.steps)
            .map(|s| self.step_value(s).to_string())
            .collect::<Vec<_>>()
            .join("/");
        first.replace(",step=0,", &format!(",step={steps},"))
    }

    /// Refuses impossible shapes before anything starts.
    pub fn check(&self) -> Result<(), Error> {
        let zero = [
            ("--members", self.members),
            ("--steps", self.steps),
            ("--levels", self.levels),
            ("--params", self.params),
        ];
        if let Some((flag, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(Error::Usage(format!("{flag} must be at least 1")));
        }
        if self.params as usize > PARAMS.len() {
            return Err(Error::Usage(format!(
                "--params {} is more than the {} model-level parameters haar knows ({:?})",
                self.params,
                PARAMS.len(),
                PARAMS
            )));
        }
        if self.expver.len() != 4 {
            return Err(Error::Usage(format!(
                "--expver {:?} must be 4 characters (e.g. 0001, xxxx)",
                self.expver
            )));
        }
        if self.field_size < field::MIN_SIZE {
            return Err(Error::Usage(format!(
                "--field-size {} is smaller than the {}-byte minimum (header + one value)",
                self.field_size,
                field::MIN_SIZE
            )));
        }
        if self.field_size > field::MAX_SIZE {
            return Err(Error::Usage(format!(
                "--field-size {} is larger than the {} bytes a field may hold",
                self.field_size,
                field::MAX_SIZE
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            class: "rd".into(),
            expver: "xxxx".into(),
            date: "20261121".into(),
            time: "0000".into(),
            members: 3,
            steps: 2,
            step_hours: 6,
            levels: 4,
            params: 2,
            field_size: 4096,
        }
    }

    #[test]
    fn layout_keys_and_requests() {
        let l = layout();
        assert_eq!(l.fields_per_step(), 8);
        assert_eq!(l.total_fields(), 48);
        assert_eq!(l.field(0), (130, 1));
        assert_eq!(l.field(3), (131, 2));
        for f in 0..l.fields_per_step() {
            let (p, lv) = l.field(f);
            assert_eq!(l.field_index(p, lv), Some(f));
        }
        assert_eq!(l.field_index(132, 1), None);
        assert_eq!(l.field_index(130, 5), None);
        let k = l.key(2, 1, 3);
        assert_eq!(k.get("number"), Some("2"));
        assert_eq!(k.get("step"), Some("6"));
        assert_eq!(k.get("levelist"), Some("2"));
        assert_eq!(k.get("param"), Some("131"));
        assert_eq!(l.product_key("em", 1, 3).get("number"), None);
        let r = l.request("pf", 1, None);
        assert!(
            r.contains("number=1/to/3,levelist=1/to/4,param=130/131"),
            "{r}"
        );
        let r = l.request("es", 0, Some(3));
        assert!(
            r.ends_with("type=es,levtype=ml,step=0,levelist=2,param=131"),
            "{r}"
        );
        assert!(l.check().is_ok());
        let mut bad = l.clone();
        bad.members = 0;
        assert!(bad.check().is_err());
        bad = l.clone();
        bad.params = 13;
        assert!(bad.check().is_err());
    }
}
