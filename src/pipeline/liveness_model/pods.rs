//! The pods of the liveness state-machine test: an exporter reading the
//! pods' parent directory (`--dir.subdirectories-label pod`), each
//! subdirectory a pod whose writers (the crate's own writer, real files)
//! start, count, exit by SIGKILL or cleanly, and which appears and goes.
//! Its answer must equal a fresh prometheus_client merge of each present
//! pod's files, combined as the pods' label says.
//!
//! The pods' readers take the system's evidence (`pipeline/parts.rs` is not
//! given the seam), so their writers carry pids no Linux process can have
//! ([`super::model::POD_PIDS`]): unknown, served as prometheus_client
//! serves them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::model::{Model, Step};
use crate::format::file_name::GaugeMode;
use crate::format::writer::{mark_process_dead, ProcessWriter};
use crate::model::MetricFamily;
use crate::pipeline::{Collector, Source};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::{LivenessMode, WriterPolicy};
use crate::source::{Input, MemoryBudget};
use crate::transform::combine::{combine, Part};

/// The pods' parent, its exporter, and the writers' files.
pub(super) struct Pods {
    dir: PathBuf,
    source: Source,
    /// By the model's pod writer index.
    writers: Vec<ProcessWriter>,
}

impl Pods {
    pub(super) fn new(root: &Path, model: &Model, policy: WriterPolicy) -> Self {
        let dir = root.join("pods");
        std::fs::create_dir(&dir).unwrap();
        let source = Source::new(
            vec![Input::Directory(dir.clone())],
            Some("pod".into()),
            LinkPolicy::default(),
        )
        .with_writer_policy(WriterPolicy {
            liveness: LivenessMode::Auto,
            ..policy
        })
        .with_memory_budget(model.budget.map(|b| Arc::new(MemoryBudget::new(b))));
        Self {
            dir,
            source,
            writers: Vec::new(),
        }
    }

    fn pod_dir(&self, model: &Model, pod: usize) -> PathBuf {
        self.dir.join(&model.pods[pod].name)
    }

    fn count(&mut self, writer: usize) {
        let w = &mut self.writers[writer];
        let pid = w.pid().to_owned();
        let requests = w
            .counter("requests", "Requests.", &[("worker", &pid)])
            .unwrap();
        requests.inc(w, 1.0).unwrap();
    }

    /// The model's last pod writer starts.
    fn start(&mut self, model: &Model) {
        let w = model.pod_writers.last().expect("applied to the model");
        let mut writer = ProcessWriter::new(self.pod_dir(model, w.pod), w.pid);
        let running = writer
            .gauge("running", "Running.", &[], GaugeMode::LiveSum)
            .unwrap();
        running.set(&mut writer, 1.0).unwrap();
        self.writers.push(writer);
        self.count(self.writers.len() - 1);
    }

    pub(super) fn apply(&mut self, model: &Model, step: &Step) {
        match *step {
            Step::AddPod { .. } => {
                std::fs::create_dir(self.pod_dir(model, model.pods.len() - 1)).unwrap();
                self.start(model);
            }
            Step::PodWorker { .. } => self.start(model),
            Step::PodWrite { writer } => self.count(writer),
            Step::PodExit {
                writer,
                kill: false,
            } => {
                let w = &model.pod_writers[writer];
                mark_process_dead(&self.pod_dir(model, w.pod), w.pid).unwrap();
            }
            Step::RemovePod { pod } => std::fs::remove_dir_all(self.pod_dir(model, pod)).unwrap(),
            _ => {}
        }
    }

    /// The exporter's answer.
    pub(super) fn answer(&mut self) -> Vec<MetricFamily> {
        self.source.collect().collection.families
    }

    /// A fresh prometheus_client merge of each present pod's files (in the
    /// order a listing gives them, as the exporter reads them), combined
    /// under the pods' label in the order of their names.
    pub(super) fn expected(&self, model: &Model) -> Vec<MetricFamily> {
        let mut present: Vec<&str> = model
            .pods
            .iter()
            .filter(|p| !p.removed)
            .map(|p| p.name.as_str())
            .collect();
        present.sort_unstable();
        let parts = present
            .into_iter()
            .map(|name| {
                let files: Vec<Input> = std::fs::read_dir(self.dir.join(name))
                    .unwrap()
                    .map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|e| e == "db"))
                    .map(Input::File)
                    .collect();
                Part {
                    value: name.into(),
                    families: Collector::new().collect(&files).families,
                }
            })
            .collect();
        combine(&"pod".into(), parts).families
    }

    /// Every pod the model keeps is there, and none other (the exporter
    /// removes none).
    pub(super) fn check(&self, model: &Model) {
        for pod in &model.pods {
            assert_eq!(
                self.dir.join(&pod.name).exists(),
                !pod.removed,
                "pod {}",
                pod.name
            );
        }
    }
}
