//! A small tmpfs mounted for one test (full-storage tests of the CLI and the mount), shared
//! by the test binaries that include it with `#[path = "common/small_fs.rs"] mod small_fs;`.

use std::path::Path;
use std::process::{Command, Stdio};

/// A small tmpfs mounted for one test, unmounted when dropped.
pub struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    /// `None` when this process may not mount (not root): the test then says so and passes
    /// only if `HAAR_REQUIRE_ROOT_TESTS` is unset (CI sets it).
    pub fn mount(size: &str) -> Option<SmallFs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("HAAR_REQUIRE_ROOT_TESTS").is_none(),
                "cannot mount a tmpfs (HAAR_REQUIRE_ROOT_TESTS is set): run as root"
            );
            eprintln!("skipped: mounting a tmpfs needs root");
            return None;
        }
        Some(SmallFs { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
