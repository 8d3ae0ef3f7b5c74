//! Empty: present so that cargo resolves this crate's build-dependencies (see Cargo.toml).
fn main() {}
