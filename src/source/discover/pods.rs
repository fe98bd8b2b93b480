//! Pod and container names for a pod UID, from the kubelet's log tree, and
//! whether the pod still exists, without asking the API server.
//!
//! The kubelet writes each container's logs to
//! `/var/log/pods/<namespace>_<pod-name>_<pod-uid>/<container-name>/<restart>.log`
//! from the moment the pod's sandbox is created until the pod is deleted
//! (its garbage collector then removes the pod's directory), so a read-only
//! mount of that tree maps a pod UID to its namespace and name, lists its
//! containers, and says whether the pod exists. Namespaces, pod names and
//! container names cannot hold `_` (they are DNS labels or subdomains), so the
//! directory name splits unambiguously.
//!
//! A container ID appears nowhere in that tree. Which container a process
//! runs in is decided, in order (see [`PodLogs::container_name`]):
//!
//! 1. the pod has one container directory: that container (a pod with an init
//!    container, a sidecar or an ephemeral container has several);
//! 2. the kubelet's links `/var/log/containers/<pod>_<namespace>_<container>-<container-id>.log`
//!    (each pointing to the container's current log file; the whole name cut
//!    to 255 bytes) name the container whose ID the process's cgroup gives;
//! 3. otherwise it is unknown (`None`): the caller names the container by its
//!    ID (from the cgroup) instead.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};

/// Where the kubelet writes pod logs by default.
pub const DEFAULT_POD_LOG_DIR: &str = "/var/log/pods";

/// Where the kubelet links each container's log file by default.
pub const DEFAULT_CONTAINER_LOG_DIR: &str = "/var/log/containers";

/// The kubelet's log tree: the pod directories and, optionally, the
/// container links beside them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodLogs {
    pods: PathBuf,
    containers: Option<PathBuf>,
}

impl PodLogs {
    /// The pod directories under `pods` (`/var/log/pods` on a node), without
    /// container links.
    pub fn new(pods: impl Into<PathBuf>) -> Self {
        Self {
            pods: pods.into(),
            containers: None,
        }
    }

    /// The kubelet's default layout: [`DEFAULT_POD_LOG_DIR`] with the links of
    /// [`DEFAULT_CONTAINER_LOG_DIR`].
    pub fn kubelet_default() -> Self {
        Self::new(DEFAULT_POD_LOG_DIR).with_container_links(DEFAULT_CONTAINER_LOG_DIR)
    }

    /// Also reads the container links in `dir` (`/var/log/containers`).
    pub fn with_container_links(mut self, dir: impl Into<PathBuf>) -> Self {
        self.containers = Some(dir.into());
        self
    }

    /// The pod directories' root.
    pub fn pods_dir(&self) -> &Path {
        &self.pods
    }

    /// The container links' directory, if read.
    pub fn container_links_dir(&self) -> Option<&Path> {
        self.containers.as_deref()
    }

    /// Lists the pod directories (one `readdir`). An error means the root
    /// cannot be read: whether any pod exists is then unknown.
    pub fn index(&self) -> io::Result<PodIndex> {
        let mut by_uid = HashMap::new();
        for entry in std::fs::read_dir(&self.pods)? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name();
            let Some((namespace, pod, uid)) = name.to_str().and_then(parse_pod_dir_name) else {
                continue;
            };
            by_uid.insert(
                uid.to_owned(),
                PodEntry {
                    namespace: namespace.to_owned(),
                    name: pod.to_owned(),
                    uid: uid.to_owned(),
                    dir: entry.path(),
                },
            );
        }
        Ok(PodIndex { by_uid })
    }

    /// The name of the container of `pod` whose ID is `container_id` (from
    /// the process's cgroup), by the rules in the module's documentation;
    /// `None` when they do not decide.
    pub fn container_name(&self, pod: &PodEntry, container_id: Option<&str>) -> Option<String> {
        let containers = pod.containers();
        if let [only] = containers.as_slice() {
            return Some(only.clone());
        }
        let id = container_id?;
        let links = std::fs::read_dir(self.containers.as_ref()?).ok()?;
        links
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|name| parse_container_link_name(&name))
            .find(|link| {
                link.pod == pod.name
                    && link.namespace == pod.namespace
                    && link.id_matches(id)
                    && containers.contains(&link.container)
            })
            .map(|link| link.container)
    }
}

/// The pods whose log directories exist, by UID: one reading of the tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodIndex {
    by_uid: HashMap<String, PodEntry>,
}

impl PodIndex {
    /// The pod with this UID, if its log directory exists.
    pub fn get(&self, uid: &str) -> Option<&PodEntry> {
        self.by_uid.get(uid)
    }

    /// Whether the pod with this UID exists (its log directory does).
    pub fn contains(&self, uid: &str) -> bool {
        self.by_uid.contains_key(uid)
    }

    /// How many pods there are.
    pub fn len(&self) -> usize {
        self.by_uid.len()
    }

    /// Whether there is no pod.
    pub fn is_empty(&self) -> bool {
        self.by_uid.is_empty()
    }
}

/// One pod's log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEntry {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The pod's UID.
    pub uid: String,
    /// `<root>/<namespace>_<name>_<uid>`.
    pub dir: PathBuf,
}

impl PodEntry {
    /// The names of the pod's container directories, sorted (empty when the
    /// directory is gone or unreadable).
    pub fn containers(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| {
                let e = e.ok()?;
                e.file_type().ok()?.is_dir().then_some(())?;
                e.file_name().into_string().ok()
            })
            .collect();
        names.sort();
        names
    }
}

/// `(namespace, pod, uid)` of a pod log directory's name
/// `<namespace>_<pod>_<uid>`.
pub fn parse_pod_dir_name(name: &str) -> Option<(&str, &str, &str)> {
    let mut parts = name.split('_');
    let (namespace, pod, uid) = (parts.next()?, parts.next()?, parts.next()?);
    let ok = parts.next().is_none() && [namespace, pod, uid].iter().all(|p| !p.is_empty());
    ok.then_some((namespace, pod, uid))
}

/// The parts of a kubelet container link's name
/// `<pod>_<namespace>_<container>-<container-id>.log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLink {
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The container's name.
    pub container: String,
    /// The container's ID, or its beginning when the kubelet cut the name to
    /// 255 bytes.
    pub id: String,
}

impl ContainerLink {
    /// Whether the link is the container `id`'s: the same ID, or its
    /// beginning (at least 12 characters) when the name was cut.
    pub fn id_matches(&self, id: &str) -> bool {
        self.id == id || (self.id.len() >= 12 && id.starts_with(&self.id))
    }
}

/// Parses a container link's file name; `None` when it is not one.
pub fn parse_container_link_name(name: &str) -> Option<ContainerLink> {
    // The kubelet cuts the name (without `.log`) to 251 bytes, and then
    // appends `.log`; a cut name may also have lost part of the container.
    let stem = name.strip_suffix(".log")?;
    let mut parts = stem.splitn(3, '_');
    let (pod, namespace, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let (container, id) = rest.rsplit_once('-')?;
    let ok = [pod, namespace, container, id]
        .iter()
        .all(|p| !p.is_empty())
        && id.bytes().all(|b| b.is_ascii_hexdigit());
    ok.then(|| ContainerLink {
        pod: pod.to_owned(),
        namespace: namespace.to_owned(),
        container: container.to_owned(),
        id: id.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "3f1c2b8e-6d2a-4f7e-9a51-0c8d2e4b7a19";
    const CID: &str = "8b6f0e3c1d2a4f5b9c7e6d5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c";
    const OTHER: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    fn pod_dir(root: &Path, ns: &str, pod: &str, uid: &str, containers: &[&str]) -> PathBuf {
        let dir = root.join(format!("{ns}_{pod}_{uid}"));
        for c in containers {
            std::fs::create_dir_all(dir.join(c)).unwrap();
            std::fs::write(dir.join(c).join("0.log"), "").unwrap();
        }
        dir
    }

    #[test]
    fn names_split_on_underscores() {
        assert_eq!(
            parse_pod_dir_name(&format!("llm_vllm-0_{UID}")),
            Some(("llm", "vllm-0", UID))
        );
        assert_eq!(
            parse_pod_dir_name("kube-system_kube-apiserver-cp_33d556edd3ae8ef21980288cef77ae8b"),
            Some((
                "kube-system",
                "kube-apiserver-cp",
                "33d556edd3ae8ef21980288cef77ae8b"
            ))
        );
        assert_eq!(parse_pod_dir_name("a_b"), None);
        assert_eq!(parse_pod_dir_name("a_b_c_d"), None);
        assert_eq!(parse_pod_dir_name("a__c"), None);

        let link = parse_container_link_name(&format!("vllm-0_llm_vllm-server-{CID}.log")).unwrap();
        assert_eq!(
            (
                link.pod.as_str(),
                link.namespace.as_str(),
                link.container.as_str()
            ),
            ("vllm-0", "llm", "vllm-server")
        );
        assert!(link.id_matches(CID));
        assert!(!link.id_matches(OTHER));
        let cut = parse_container_link_name(&format!("p_n_c-{}.log", &CID[..20])).unwrap();
        assert!(cut.id_matches(CID));
        let too_short = parse_container_link_name("p_n_c-8b6f.log").unwrap();
        assert!(!too_short.id_matches(CID));
        assert_eq!(parse_container_link_name("p_n_c.log"), None);
        assert_eq!(parse_container_link_name("p_n_c-xyz.log"), None);
        assert_eq!(parse_container_link_name(&format!("p_n_c-{CID}")), None);
    }

    #[test]
    fn the_index_maps_uids_to_names_and_says_which_pods_exist() {
        let root = tempfile::tempdir().unwrap();
        pod_dir(root.path(), "llm", "vllm-0", UID, &["vllm"]);
        std::fs::write(root.path().join("stray-file"), "").unwrap();
        let logs = PodLogs::new(root.path());
        let index = logs.index().unwrap();
        assert_eq!(index.len(), 1);
        let pod = index.get(UID).unwrap();
        assert_eq!(
            (pod.namespace.as_str(), pod.name.as_str()),
            ("llm", "vllm-0")
        );
        assert!(index.contains(UID) && !index.contains("other"));
        // One container: its name, whatever the ID.
        assert_eq!(logs.container_name(pod, None).as_deref(), Some("vllm"));
        assert_eq!(
            logs.container_name(pod, Some(OTHER)).as_deref(),
            Some("vllm")
        );
        std::fs::remove_dir_all(&pod.dir).unwrap();
        assert!(logs.index().unwrap().is_empty());
        assert!(PodLogs::new(root.path().join("missing")).index().is_err());
    }

    #[test]
    fn several_containers_are_told_apart_by_the_kubelets_links() {
        let root = tempfile::tempdir().unwrap();
        let pods = root.path().join("pods");
        let links = root.path().join("containers");
        std::fs::create_dir_all(&links).unwrap();
        let dir = pod_dir(&pods, "llm", "vllm-0", UID, &["init", "proxy", "vllm"]);
        for (container, id) in [("vllm", CID), ("proxy", OTHER)] {
            std::os::unix::fs::symlink(
                dir.join(container).join("0.log"),
                links.join(format!("vllm-0_llm_{container}-{id}.log")),
            )
            .unwrap();
        }
        // Another pod's link with the same container ID prefix does not count.
        std::os::unix::fs::symlink("/x", links.join(format!("vllm-1_llm_other-{CID}.log")))
            .unwrap();
        let without_links = PodLogs::new(&pods);
        let pod = without_links.index().unwrap().get(UID).cloned().unwrap();
        assert_eq!(pod.containers(), ["init", "proxy", "vllm"]);
        assert_eq!(without_links.container_name(&pod, Some(CID)), None);
        let logs = PodLogs::new(&pods).with_container_links(&links);
        assert_eq!(
            logs.container_name(&pod, Some(CID)).as_deref(),
            Some("vllm")
        );
        assert_eq!(
            logs.container_name(&pod, Some(OTHER)).as_deref(),
            Some("proxy")
        );
        assert_eq!(logs.container_name(&pod, None), None);
        let unknown = "2222222222222222222222222222222222222222222222222222222222222222";
        assert_eq!(logs.container_name(&pod, Some(unknown)), None);
        assert_eq!(
            PodLogs::kubelet_default().pods_dir(),
            Path::new(DEFAULT_POD_LOG_DIR)
        );
        assert_eq!(
            PodLogs::kubelet_default().container_links_dir(),
            Some(Path::new(DEFAULT_CONTAINER_LOG_DIR))
        );
    }
}
