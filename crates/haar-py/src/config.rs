//! The configuration as Python gives it (`env`, `file` or `yaml`): the [`OpenOptions`] a store
//! opens with, and `config_json`, the configuration as `FDB.config()` shows it.

use haar::{ConfigSource, Error, OpenOptions};
use pyo3::prelude::*;

use crate::failure::{Failure, Outcome, run};

/// How the configuration is given, from the Python layer.
pub(crate) fn open_options(kind: &str, value: Option<String>) -> Outcome<OpenOptions> {
    let config = match (kind, value) {
        ("env", _) => ConfigSource::from_env(),
        ("file", Some(p)) => ConfigSource::File(p.into()),
        ("yaml", Some(text)) => ConfigSource::Yaml {
            text,
            origin: "the config given to haar.FDB".into(),
        },
        (k, _) => {
            return Err(Failure::Haar(Error::Config(format!(
                "unknown configuration kind {k:?} (env, file or yaml)"
            ))));
        }
    };
    Ok(OpenOptions {
        config,
        ..OpenOptions::default()
    })
}

/// The configuration a source names, as JSON text, for `FDB.config()`: the YAML given or read
/// (a file, or from the environment `$HAAR_CONFIG`, then FDB5's variables: haar's keys or
/// FDB5's, as written), or, where the environment names none, haar's defaults as the library
/// uses them. Opens no store.
#[pyfunction]
#[pyo3(signature = (kind, value=None))]
pub(crate) fn config_json(py: Python<'_>, kind: &str, value: Option<String>) -> PyResult<String> {
    let kind = kind.to_string();
    run(py, move || {
        let opts = open_options(&kind, value)?;
        let parsed: serde_json::Value = match opts.config.text()? {
            Some((text, origin)) => serde_yaml_ng::from_str(&text)
                .map_err(|e| Error::Config(format!("{origin}: not YAML: {e}")))?,
            None => serde_json::to_value(opts.config()?)
                .map_err(|e| Error::Config(format!("haar's default configuration: {e}")))?,
        };
        Ok(parsed.to_string())
    })
}
