//! The deployment shapes liveness depends on: the exporter in the writers'
//! pid namespace (a sidecar with `shareProcessNamespace`, a process beside
//! the application) and in a pid namespace of its own (a Kubernetes sidecar
//! without `shareProcessNamespace`, the default), made with the real kernel
//! feature: `unshare --pid --fork --mount-proc`. Tests of behaviour that
//! depends on liveness run once per shape ([`Shape::each`]).

use std::ffi::OsString;
use std::process::{Command, Stdio};

use super::{Exporter, Launch};

/// Where the exporter runs relative to the writers' processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// The writers' pid namespace: their pids can be seen.
    WritersPidNamespace,
    /// A pid namespace of its own, with its own `/proc`: no writer's pid
    /// can be seen.
    OwnPidNamespace,
}

impl Shape {
    /// Every shape this machine can make: both, or (without a working
    /// `unshare`, a failure in CI) the writers' namespace only.
    pub(crate) fn each() -> Vec<Shape> {
        let works = Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if works {
            return vec![Shape::WritersPidNamespace, Shape::OwnPidNamespace];
        }
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "`unshare --pid --fork --mount-proc` is required in CI (root)"
        );
        eprintln!("skipping the own-pid-namespace shape: `unshare --pid` does not work here");
        vec![Shape::WritersPidNamespace]
    }

    /// Whether the writers' pids can be seen from the exporter.
    pub(crate) fn pids_visible(self) -> bool {
        self == Shape::WritersPidNamespace
    }

    /// `launch` in this shape.
    pub(crate) fn launch(self, launch: Launch) -> Launch {
        match self {
            Shape::WritersPidNamespace => launch,
            Shape::OwnPidNamespace => {
                let mut wrapper: Vec<OsString> =
                    ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
                        .iter()
                        .map(OsString::from)
                        .collect();
                wrapper.extend(launch.wrapper.iter().cloned());
                Launch {
                    wrapper,
                    forks: true,
                    ..launch
                }
            }
        }
    }

    /// [`Exporter::start`] in this shape.
    pub(crate) fn start(self, args: &[&str]) -> Exporter {
        Exporter::launch(args, &self.launch(Launch::default()))
    }
}
