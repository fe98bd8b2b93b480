//! The pods of the liveness state-machine test: an exporter reading the
//! pods' parent directory (`--dir.subdirectories-label pod`), each
//! subdirectory a pod that appears and goes, whose writers (the crate's own
//! writer, real files) start, count and exit by SIGKILL or cleanly, driven
//! through the scripted world as a run's writers are (`mod.rs`: their pids
//! drawn as the others', colliding with the exporter's own thread ids in a
//! pid namespace of its own; their processes in the seam's table; their
//! files held by the exporter's threads). The pods' readers are given the
//! seam (`PartReaders::set_evidence`, through [`Source::with_evidence`]).
//!
//! Its answer must equal a fresh prometheus_client merge of each present
//! pod's files, less the live gauges of the writers the model finds dead
//! by a directory's rules (`model::Model::ask_pods`: a collector of its own
//! per pod), combined as the pods' label says.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::model::{Home, Model};
use crate::model::MetricFamily;
use crate::pipeline::{Collector, Source};
use crate::source::link_policy::LinkPolicy;
use crate::source::writers::evidence::Evidence;
use crate::source::writers::WriterPolicy;
use crate::source::{Input, MemoryBudget};
use crate::transform::combine::{combine, Part};

/// The pods' parent and its exporter.
pub(super) struct Pods {
    /// The pods' parent.
    pub(super) dir: PathBuf,
    source: Source,
}

impl Pods {
    pub(super) fn new(
        root: &Path,
        model: &Model,
        policy: WriterPolicy,
        evidence: Arc<dyn Evidence>,
    ) -> Self {
        let dir = root.join("pods");
        std::fs::create_dir(&dir).unwrap();
        let source = Source::new(
            vec![Input::Directory(dir.clone())],
            Some("pod".into()),
            LinkPolicy::default(),
        )
        .with_evidence(evidence)
        .with_writer_policy(policy)
        .with_memory_budget(model.budget.map(|b| Arc::new(MemoryBudget::new(b))));
        Self { dir, source }
    }

    /// The subdirectory of pod `pod`.
    pub(super) fn pod_dir(&self, model: &Model, pod: usize) -> PathBuf {
        self.dir.join(&model.pods[pod].name)
    }

    /// The exporter's answer.
    pub(super) fn answer(&mut self) -> Vec<MetricFamily> {
        self.source.collect().collection.families
    }

    /// A fresh prometheus_client merge of each present pod's files (in the
    /// order a listing gives them, as the exporter reads them), less the
    /// live gauges of the writers the model found dead, combined under the
    /// pods' label in the order of their names.
    pub(super) fn expected(&self, model: &Model) -> Vec<MetricFamily> {
        let expected = model.expected.as_ref().expect("an ask");
        let mut present: Vec<usize> = (0..model.pods.len())
            .filter(|&p| !model.pods[p].removed)
            .collect();
        present.sort_unstable_by(|&a, &b| model.pods[a].name.cmp(&model.pods[b].name));
        let parts = present
            .into_iter()
            .map(|pod| {
                let dropped = expected.dropped_in(model, Home::Pod(pod));
                let files = super::served_files(&self.pod_dir(model, pod), &dropped, &[]);
                Part {
                    value: model.pods[pod].name.as_str().into(),
                    families: Collector::new().collect(&files).families,
                }
            })
            .collect();
        combine(&"pod".into(), parts).families
    }

    /// Every pod the model keeps is there, and none other (the exporter
    /// removes none), and none went while a writer of it lives.
    pub(super) fn check(&self, model: &Model) {
        for (i, pod) in model.pods.iter().enumerate() {
            assert_eq!(
                self.pod_dir(model, i).exists(),
                !pod.removed,
                "pod {}",
                pod.name
            );
            let lives = pod.writers.iter().any(|&w| model.writers[w].alive);
            assert!(
                !(lives && pod.removed),
                "pod {} removed while a writer lives",
                pod.name
            );
        }
    }
}
