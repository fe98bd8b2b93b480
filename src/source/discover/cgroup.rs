//! Which pod and container a process runs in, from its `/proc/<pid>/cgroup`.
//!
//! The kubelet names a pod's cgroup after the pod's UID and the container
//! runtime names the container's cgroup after the container's ID, so the path
//! alone says both, without asking the API server or the runtime:
//!
//! | driver | path |
//! | --- | --- |
//! | cgroupfs | `/kubepods/<qos>/pod<uid>/<container-id>` (`<qos>` is `burstable` or `besteffort`; Guaranteed pods sit at `/kubepods/pod<uid>/`); CRI-O names the container `crio-<id>` |
//! | systemd | `/kubepods.slice/kubepods-<qos>.slice/kubepods-<qos>-pod<uid>.slice/cri-containerd-<id>.scope` (`crio-<id>.scope`, `docker-<id>.scope`; Guaranteed: `kubepods-pod<uid>.slice`), the UID's `-` written `_` |
//!
//! cgroup v1 lists one line per hierarchy (`N:controllers:/path`), v2 one
//! line (`0::/path`), a hybrid host both. The path is relative to the
//! reader's cgroup namespace, so an exporter in a container of its own may see
//! `/../../kubepods-…` or a path under a prefix such as kind's `/kubelet/`:
//! segments are recognised wherever they are, and `..` is skipped.
//!
//! Outside Kubernetes the same rules give a container ID and no pod:
//! Docker's `/docker/<id>` (cgroupfs) and `/system.slice/docker-<id>.scope`
//! (systemd), Podman's `libpod-<id>.scope`; a plain process (a user session,
//! a system service) has neither.

use std::io;
use std::path::Path;

/// Where a process runs, as its cgroup path tells.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CgroupOwner {
    /// The cgroup path the facts come from (the v2 line's, else the first v1
    /// line that names a pod or a container, else the first line's).
    pub path: String,
    /// The pod's UID as the API server writes it (with `-`; a static pod's
    /// UID is 32 hex digits without them), when the path names a pod.
    pub pod_uid: Option<String>,
    /// The container's ID without the runtime's prefix (`cri-containerd-`,
    /// `crio-`, `docker-`, `libpod-`) and suffix (`.scope`): the ID the runtime
    /// and the kubelet's log file names use.
    pub container_id: Option<String>,
}

impl CgroupOwner {
    /// Whether the path names a pod or a container.
    pub fn is_container(&self) -> bool {
        self.pod_uid.is_some() || self.container_id.is_some()
    }

    /// The systemd service the path's last segment names
    /// (`/system.slice/gunicorn.service` → `gunicorn.service`; a user's
    /// `…/user@1000.service/app.slice/api.service` → `api.service`), outside
    /// a pod or a container. A scope (a login session, a terminal, a
    /// container) or a slice is no service: `None`.
    pub fn systemd_unit(&self) -> Option<&str> {
        if self.is_container() {
            return None;
        }
        let last = self.path.rsplit('/').find(|s| !s.is_empty())?;
        let name = last.strip_suffix(".service")?;
        (!name.is_empty()).then_some(last)
    }
}

/// Reads and parses `cgroup` of the process directory `dir` (`/proc/<pid>`).
pub fn read(dir: &Path) -> io::Result<CgroupOwner> {
    let text = std::fs::read_to_string(dir.join("cgroup"))?;
    parse(&text).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no cgroup line"))
}

/// Parses the text of a `/proc/<pid>/cgroup` file; `None` when it has no line
/// of the form `N:controllers:/path`.
///
/// The v2 line (`0::`) wins when it names a pod or a container; otherwise the
/// first v1 line that names a pod, then the first that names a container;
/// otherwise the v2 line's (or the first line's) path with neither.
pub fn parse(text: &str) -> Option<CgroupOwner> {
    let mut unified = None;
    let mut legacy = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if id.parse::<u32>().is_err() {
            continue;
        }
        let owner = parse_path(path);
        if id == "0" && controllers.is_empty() {
            unified = Some(owner);
        } else {
            legacy.push(owner);
        }
    }
    if let Some(owner) = unified.as_ref().filter(|o| o.is_container()) {
        return Some(owner.clone());
    }
    let with_pod = legacy.iter().find(|o| o.pod_uid.is_some());
    let with_container = legacy.iter().find(|o| o.container_id.is_some());
    with_pod
        .or(with_container)
        .cloned()
        .or(unified)
        .or_else(|| legacy.into_iter().next())
}

/// What one cgroup path names: the pod (its last pod segment) and the
/// container (the first container segment after the pod's, or, outside a
/// pod, the last container segment).
pub fn parse_path(path: &str) -> CgroupOwner {
    let mut pod_uid = None;
    let mut container_id = None;
    for segment in path.split('/').filter(|s| !s.is_empty() && *s != "..") {
        if let Some(uid) = pod_segment(segment) {
            pod_uid = Some(uid);
            container_id = None;
        } else if let Some(id) = container_segment(segment) {
            // Inside a pod the container is the pod's child; a runtime may
            // nest cgroups below it (CRI-O's `…/container`), which are not
            // containers of their own.
            if pod_uid.is_none() || container_id.is_none() {
                container_id = Some(id);
            }
        }
    }
    CgroupOwner {
        path: path.to_owned(),
        pod_uid,
        container_id,
    }
}

/// The pod UID a segment names: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid_with_underscores>.slice` (systemd, also under
/// a prefix such as `kubelet-kubepods-…`).
fn pod_segment(segment: &str) -> Option<String> {
    let uid = if let Some(slice) = segment
        .strip_suffix(".slice")
        .filter(|s| s.split('-').any(|part| part == "kubepods"))
    {
        // `kubepods-besteffort-pod<uid>`, `kubepods-pod<uid>` (or, under a
        // kubelet that prefixes its slices, `kubelet-kubepods-…`): the UID
        // itself has no `-` here (systemd writes them `_`).
        let last = slice.rsplit('-').next()?;
        last.strip_prefix("pod")?.replace('_', "-")
    } else {
        segment.strip_prefix("pod")?.to_owned()
    };
    is_pod_uid(&uid).then_some(uid)
}

/// Whether `uid` has the shape of a pod UID: a UUID (`8-4-4-4-12` hex digits)
/// or, for a static pod, the 32 hex digits of the kubelet's hash.
fn is_pod_uid(uid: &str) -> bool {
    let hex = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit());
    if uid.len() == 32 {
        return hex(uid);
    }
    let groups: Vec<&str> = uid.split('-').collect();
    groups.len() == 5
        && groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| hex(g))
}

/// Runtime prefixes of a container's cgroup name (`<prefix><id>[.scope]`).
/// CRI-O's `crio-conmon-<id>` (its monitor process) is not a container.
const CONTAINER_PREFIXES: [&str; 5] = [
    "cri-containerd-",
    "crio-",
    "docker-",
    "libpod-",
    "containerd-",
];

/// The container ID a segment names: `<prefix><id>.scope` (systemd),
/// `crio-<id>` (CRI-O with cgroupfs) or a bare 64-hex-digit ID (containerd
/// and Docker with cgroupfs).
fn container_segment(segment: &str) -> Option<String> {
    let name = segment.strip_suffix(".scope").unwrap_or(segment);
    let id = CONTAINER_PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    let bare = id.len() == name.len();
    let hex = id.len() >= 12 && id.bytes().all(|b| b.is_ascii_hexdigit());
    // A bare segment is taken only at full length, so that a hex-looking
    // slice or user name is not mistaken for a container.
    (hex && (!bare || id.len() == 64)).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "3f1c2b8e-6d2a-4f7e-9a51-0c8d2e4b7a19";
    const UID_: &str = "3f1c2b8e_6d2a_4f7e_9a51_0c8d2e4b7a19";
    const CID: &str = "8b6f0e3c1d2a4f5b9c7e6d5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";

    fn owner(text: &str) -> (Option<String>, Option<String>) {
        let o = parse(text).expect("a cgroup line");
        (o.pod_uid, o.container_id)
    }

    fn pod_and_container() -> (Option<String>, Option<String>) {
        (Some(UID.to_owned()), Some(CID.to_owned()))
    }

    #[test]
    fn cgroupfs_driver_v1_and_v2() {
        for qos in ["burstable", "besteffort"] {
            let v2 = format!("0::/kubepods/{qos}/pod{UID}/{CID}\n");
            assert_eq!(owner(&v2), pod_and_container(), "{v2}");
            let v1 = format!(
                "12:pids:/kubepods/{qos}/pod{UID}/{CID}\n\
                 11:cpu,cpuacct:/kubepods/{qos}/pod{UID}/{CID}\n\
                 1:name=systemd:/kubepods/{qos}/pod{UID}/{CID}\n"
            );
            assert_eq!(owner(&v1), pod_and_container(), "{v1}");
        }
        // Guaranteed pods sit directly under /kubepods.
        let guaranteed = format!("0::/kubepods/pod{UID}/{CID}\n");
        assert_eq!(owner(&guaranteed), pod_and_container());
        // The pod's own cgroup (no container yet).
        let pod_only = format!("0::/kubepods/burstable/pod{UID}\n");
        assert_eq!(owner(&pod_only), (Some(UID.to_owned()), None));
        // CRI-O with cgroupfs.
        let crio = format!("0::/kubepods/besteffort/pod{UID}/crio-{CID}\n");
        assert_eq!(owner(&crio), pod_and_container());
    }

    #[test]
    fn systemd_driver_with_every_runtime() {
        for (qos_slice, pod_slice) in [
            (
                "kubepods-burstable.slice/",
                format!("kubepods-burstable-pod{UID_}.slice"),
            ),
            (
                "kubepods-besteffort.slice/",
                format!("kubepods-besteffort-pod{UID_}.slice"),
            ),
            ("", format!("kubepods-pod{UID_}.slice")),
        ] {
            for scope in [
                format!("cri-containerd-{CID}.scope"),
                format!("crio-{CID}.scope"),
                format!("docker-{CID}.scope"),
            ] {
                let path = format!("/kubepods.slice/{qos_slice}{pod_slice}/{scope}");
                assert_eq!(
                    owner(&format!("0::{path}\n")),
                    pod_and_container(),
                    "{path}"
                );
                let v1 = format!("7:memory:{path}\n1:name=systemd:{path}\n");
                assert_eq!(owner(&v1), pod_and_container(), "{path}");
            }
        }
        // CRI-O's monitor is not the container; a sub-cgroup of the
        // container's scope keeps the container's ID.
        let conmon =
            format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-conmon-{CID}.scope\n");
        assert_eq!(owner(&conmon), (Some(UID.to_owned()), None));
        let nested =
            format!("0::/kubepods.slice/kubepods-pod{UID_}.slice/crio-{CID}.scope/container\n");
        assert_eq!(owner(&nested), pod_and_container());
    }

    #[test]
    fn a_cgroup_namespace_or_a_prefix_does_not_hide_the_pod() {
        let relative =
            format!("0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n");
        assert_eq!(owner(&relative), pod_and_container());
        let kind = format!("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n");
        // kind's nested kubelet prefixes its slices with `kubelet-`.
        assert_eq!(owner(&kind), pod_and_container());
        let prefixed = format!("0::/kubelet/kubepods/burstable/pod{UID}/{CID}\n");
        assert_eq!(owner(&prefixed), pod_and_container());
    }

    #[test]
    fn a_static_pod_uid_is_a_hash() {
        let hash = "33d556edd3ae8ef21980288cef77ae8b";
        let text = format!("0::/kubepods/burstable/pod{hash}/{CID}\n");
        assert_eq!(owner(&text), (Some(hash.to_owned()), Some(CID.to_owned())));
    }

    #[test]
    fn hybrid_hosts_prefer_the_line_that_names_the_pod() {
        // v2 line at the root (a hybrid host whose kubelet uses v1 only).
        let text = format!(
            "9:name=systemd:/\n8:pids:/kubepods/burstable/pod{UID}/{CID}\n4:memory:/\n0::/\n"
        );
        assert_eq!(owner(&text), pod_and_container());
        let o = parse(&text).unwrap();
        assert_eq!(o.path, format!("/kubepods/burstable/pod{UID}/{CID}"));
        // The v2 line names it, v1 lines do not.
        let text = format!(
            "8:pids:/\n0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
        );
        assert_eq!(owner(&text), pod_and_container());
    }

    #[test]
    fn processes_outside_kubernetes() {
        // Docker with cgroupfs (v1) and systemd (v2).
        let docker_v1 = format!("12:pids:/docker/{CID}\n1:name=systemd:/docker/{CID}\n");
        assert_eq!(owner(&docker_v1), (None, Some(CID.to_owned())));
        let docker_v2 = format!("0::/system.slice/docker-{CID}.scope\n");
        assert_eq!(owner(&docker_v2), (None, Some(CID.to_owned())));
        let podman = format!("0::/machine.slice/libpod-{CID}.scope/container\n");
        assert_eq!(owner(&podman), (None, Some(CID.to_owned())));
        // A user session and a system service.
        for path in [
            "/user.slice/user-1000.slice/session-2.scope",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/podman-1234.scope",
            "/system.slice/gunicorn.service",
            "/",
        ] {
            let o = parse(&format!("0::{path}\n")).unwrap();
            assert_eq!(
                (o.pod_uid.as_deref(), o.container_id.as_deref()),
                (None, None),
                "{path}"
            );
            assert_eq!(o.path, path);
            assert!(!o.is_container());
        }
        // This machine's kind of v1 host: every line at the root but one.
        let plain =
            "9:name=systemd:/\n4:memory:/process_api/9a335a0149bf7a98f50e0da6674620cd\n0::/\n";
        let o = parse(plain).unwrap();
        assert!(!o.is_container(), "{o:?}");
        assert_eq!(o.path, "/");
    }

    #[test]
    fn a_systemd_service_is_its_unit_and_a_scope_is_none() {
        let unit = |text: &str| parse(text).and_then(|o| o.systemd_unit().map(str::to_owned));
        assert_eq!(
            unit("0::/system.slice/gunicorn.service\n").as_deref(),
            Some("gunicorn.service")
        );
        assert_eq!(
            unit("0::/user.slice/user-1000.slice/user@1000.service/app.slice/api.service\n")
                .as_deref(),
            Some("api.service")
        );
        assert_eq!(
            unit("12:pids:/system.slice/web.service\n1:name=systemd:/system.slice/web.service\n")
                .as_deref(),
            Some("web.service")
        );
        for none in [
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            "0::/system.slice\n",
            "0::/\n",
            "0::/system.slice/.service\n",
            &format!("0::/system.slice/docker-{CID}.scope\n"),
            &format!("0::/kubepods/burstable/pod{UID}/{CID}\n"),
        ] {
            assert_eq!(unit(none), None, "{none}");
        }
    }

    #[test]
    fn odd_text_is_not_a_pod() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("garbage\n"), None);
        assert_eq!(parse("x::/kubepods/podzz\n"), None);
        for path in [
            "/kubepods/burstable/pod1234/abc",
            "/kubepods/burstable/podman",
            "/kubepods-burstable-podnot_a_uid.slice",
            "/deadbeef",
        ] {
            let o = parse_path(path);
            assert_eq!((o.pod_uid, o.container_id), (None, None), "{path}");
        }
        // A path with a `:` in it keeps it.
        let o = parse(&format!("0::/kubepods/pod{UID}/{CID}:x\n")).unwrap();
        assert_eq!(o.pod_uid.as_deref(), Some(UID));
    }
}
