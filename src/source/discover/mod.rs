//! Finding every multiprocess directory on a node through `/proc`, and the pod
//! of each, without being told: the discovery core of the node agent
//! (issue 30).
//!
//! A process writing prometheus_client multiprocess files keeps each of them
//! open, so one pass over `/proc/<pid>/fd` ([`mod@scan`]) finds every directory
//! being written, the processes writing it, and the mount namespace they see
//! it in. The directory is read through a holder's root
//! (`/proc/<pid>/root/<dir>`), wherever it lives in the pod: an `emptyDir`,
//! the container's own `/tmp`, a private `tmpfs`. The tracker ([`Discovery`])
//! keeps one [`Target`] per directory across scans, holds each directory open
//! so that dead writers' files stay readable after the last writer exits
//! ([`retain`]), names the pod and container from the holder's cgroup
//! ([`cgroup`]) and the kubelet's log tree ([`pods`]), and drops a target
//! once its pod is gone.
//!
//! What the caller does (`serve --discover.processes`:
//! [`crate::pipeline::discovered`]; [`privileges`] says which capabilities
//! the scan and the reads need, and which this process lacks):
//!
//! ```no_run
//! use multiproc_exporter::source::discover::{Discovery, DiscoveryOptions, PodLogs};
//!
//! let mut discovery = Discovery::new(DiscoveryOptions {
//!     pod_logs: Some(PodLogs::kubelet_default()),
//!     ..DiscoveryOptions::default()
//! });
//! // On a period, and when `discovery.holder_gone()`:
//! let refresh = discovery.refresh();
//! for problem in &refresh.problems {
//!     eprintln!("{problem}"); // and count `problem.label()`
//! }
//! if !refresh.unreadable.is_empty() {
//!     eprintln!("{} processes' descriptors are unreadable: CAP_SYS_PTRACE missing?", refresh.unreadable.len());
//! }
//! for (id, target) in discovery.targets() {
//!     let Some(path) = target.read_path() else { continue };
//!     // Read `path` as a directory (one `Reader` per `id`), labelled with
//!     // `target.pod()` (namespace, pod, container) or, outside Kubernetes,
//!     // `target.container_id()` / `target.owner()`'s command.
//!     let _ = (id, path);
//! }
//! ```
//!
//! Labels outside Kubernetes (no pod UID in the cgroup, or no pod log
//! directory): the container ID when the cgroup names one (Docker, Podman),
//! else the systemd service it names ([`cgroup::CgroupOwner::systemd_unit`]),
//! else the owner's command name ([`scan::Holder::command`]), each with the
//! directory's path so that two directories never share labels
//! (`crate::pipeline::discovered_labels`). Inside, a container whose name the
//! log tree does not decide (several containers and no kubelet link for its
//! ID) is named by its ID.
//!
//! Symbolic links: reading through `/proc/self/fd/<n>`
//! ([`retain::KeptDir::path`]) or `/proc/<pid>/root/<dir>`, the directory's
//! own entries are the pod's files, but a link inside it pointing to an
//! absolute path resolves in the exporter's file system, not the pod's. The
//! reader's default link policy cannot tell: it compares `realpath`s, and
//! `/proc/self/fd/<n>` resolves to the path in the pod's namespace, or to `/`
//! once that namespace is gone (every target is then "inside"). Discovered
//! targets must be read following no link at all (prometheus_client writes
//! none).

pub mod cgroup;
pub mod pods;
pub mod privileges;
pub mod processes;
pub mod retain;
pub mod scan;
mod tracker;

pub use pods::PodLogs;
pub use privileges::Privileges;
pub use processes::{Processes, SystemProcesses};
pub use retain::{Decision, DirId, DropReason, Retention};
pub use scan::{scan, Holder, Scan, Sighting};
pub use tracker::{Discovery, DiscoveryOptions, Location, PodRef, Problem, Refresh, Target};
