//! haar's data mover (`haar stage`): files, directory trees and the fields of MARS requests
//! staged between named **dataspaces** — node-local directories, haar stores (posix, pmem,
//! remote, dist) and the shared file system — checksummed end to end, restartable after
//! SIGKILL, with progress, ETA and bandwidth recorded per dataspace pair. It is the engine
//! behind the `haar stage` CLI and the Slurm `burst_buffer/lua` integration (`slurm/`).
//!
//! - [`dataspace`]: the `dataspaces:` section of the one configuration file, and endpoints.
//! - [`task`]: tasks, their states, and the [`Stager`] that submits, runs, resumes, waits for
//!   and cancels them.
//! - [`tasks`]: the verbs over tasks as one interface, [`tasks::Tasks`], in this process or
//!   through the stage service; [`tasks::connect`] picks which.
//! - [`journal`]: the task journal and the per-pair bandwidth record (design §13.2).
//! - [`copy`]: the crash-safe copy of one file (design §13.3).
//! - [`write_behind`]: the writeback of a destination on disk paced with its writer.
//! - [`persist`]: data kept on the node after its job, readable by the users it is shared
//!   with.
//! - [`beneath`]: paths inside a dataspace resolved without following links out of it.
//! - [`identity`]: the file-system identity root takes to act for a user.
//! - [`launch`]: a task's runner started in its own session, its output in the task's log.
//! - [`daemon`]: the per-node stage service (`haar stage daemon`): users' tasks under their
//!   own uid, admin operations for root or the admin token, over a Unix socket (design §13.5).
//! - [`node`]: a Slurm job's staging on each of its compute nodes (Prolog, TaskProlog,
//!   Epilog), from the plan the `burst_buffer/lua` hook writes.
//! - [`placement`]: a workflow's consumer job placed on its producer's nodes (Slurm).
//!
//! Tasks run in the calling process (the CLI's `--detach` starts a background process that
//! calls [`Stager::run`]), or in runner processes the per-node [`daemon`] starts.
//!
//! ```
//! use haar_stage::{Dataspaces, Journal, Stager, TaskSpec, Direction, Mapping, State};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let text = format!(
//!     "dataspaces:\n  shared: {{kind: shared, path: {0}/pfs}}\n  local: {{kind: posix, path: {0}/node}}\n",
//!     dir.path().display()
//! );
//! std::fs::create_dir(dir.path().join("pfs")).unwrap();
//! std::fs::write(dir.path().join("pfs/input.grib"), b"GRIB....7777").unwrap();
//! let stager = Stager {
//!     spaces: Dataspaces::load(haar::ConfigSource::Yaml { text, origin: "example".into() }).unwrap(),
//!     journal: Journal::open(&dir.path().join("journal")).unwrap(),
//! };
//! let spec = TaskSpec {
//!     id: None,
//!     direction: Direction::In,
//!     src: "shared:input.grib".into(),
//!     dst: "local:job/input.grib".into(),
//!     mapping: Mapping::Same,
//! };
//! let task = stager.submit(&spec).unwrap();
//! let done = stager.run(&task.id, &mut |_| {}).unwrap();
//! assert_eq!(done.state, State::Done);
//! assert_eq!(std::fs::read(dir.path().join("node/job/input.grib")).unwrap(), b"GRIB....7777");
//! ```

#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod beneath;
pub mod copy;
pub mod daemon;
pub mod dataspace;
pub mod error;
pub mod eta;
mod fields;
pub mod identity;
pub mod journal;
pub mod launch;
pub mod node;
pub mod persist;
pub mod placement;
pub mod task;
pub mod tasks;
pub mod write_behind;

pub use dataspace::{Dataspace, Dataspaces, Endpoint, Object};
pub use error::{Error, ErrorClass, Result};
pub use journal::Journal;
pub use task::{Direction, Mapping, Stager, State, TaskRecord, TaskSpec, Teardown};
