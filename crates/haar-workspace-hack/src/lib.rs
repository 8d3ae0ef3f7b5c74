//! No code. This crate only depends on shared dependencies with the features that the
//! workspace's test build resolves, so that every build (`cargo build -p haar-cli`, `-p haar-c`,
//! maturin's) resolves them alike and reuses the same artefacts; see its Cargo.toml.
