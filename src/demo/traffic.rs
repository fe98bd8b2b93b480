//! The families a deployment writes only once it serves traffic and that the
//! simulation has no model of its own for (vLLM's CPU-offloading transfers,
//! LoRA, sleep mode and weight updates; LMCache's remote, P2P and eviction
//! statistics): the catalogue says which they are and which label values
//! they take, and each step moves them plausibly (counters grow, gauges
//! wander, histograms observe values within their bounds). Their children
//! appear at the first step, as vLLM's appear with the first traffic.

#[allow(unused_imports)]
use super::*;

/// One child and how it moves.
enum Child {
    Counter(Counter),
    /// A gauge, and whether it is a ratio in `[0, 1]` (else a small count).
    Gauge(Gauge, bool),
    /// A histogram and the range its observations come from.
    Histogram(Histogram, f64, f64),
    Summary(Summary),
}

/// The traffic-only families of one process.
pub(super) struct Traffic {
    families: Vec<&'static FamilyDef>,
    /// Label values the process fixes (model, worker id), by label name.
    fixed: Vec<(&'static str, String)>,
    /// Children per `engine` label value.
    engines: usize,
    children: Vec<Child>,
}

impl Traffic {
    /// The families of `catalogue` written only after traffic, except those
    /// named in `simulated` (the process models them itself).
    pub(super) fn new(
        catalogue: &'static Catalogue,
        simulated: &[&str],
        fixed: Vec<(&'static str, String)>,
        engines: usize,
    ) -> Traffic {
        let families = catalogue
            .families()
            .iter()
            .filter(|f| f.after_traffic && !f.written && !simulated.contains(&f.name.as_str()))
            .collect();
        Traffic {
            families,
            fixed,
            engines,
            children: Vec::new(),
        }
    }

    /// The label sets of `def`'s children: the fixed values, one child per
    /// engine, and every combination of the catalogue's values otherwise.
    fn label_sets(&self, def: &'static FamilyDef) -> Vec<Vec<(&'static str, String)>> {
        let mut sets: Vec<Vec<(&'static str, String)>> = vec![Vec::new()];
        for label in &def.labels {
            let label = label.as_str();
            let values: Vec<String> =
                if let Some((_, v)) = self.fixed.iter().find(|(n, _)| *n == label) {
                    vec![v.clone()]
                } else if label == "engine" {
                    (0..self.engines).map(|e| e.to_string()).collect()
                } else {
                    def.values_of(label)
                        .into_iter()
                        .map(str::to_owned)
                        .collect()
                };
            sets = sets
                .into_iter()
                .flat_map(|set| {
                    values.iter().map(move |v| {
                        let mut next = set.clone();
                        next.push((label, v.clone()));
                        next
                    })
                })
                .collect();
        }
        sets
    }

    fn create(&mut self, w: &mut ProcessWriter) -> io::Result<()> {
        for def in self.families.clone() {
            for set in self.label_sets(def) {
                let labels: Vec<(&str, &str)> = set.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let name = def.name.as_str();
                let child = match def.kind {
                    FamilyType::Counter => Child::Counter(w.known_counter(name, &labels)?),
                    FamilyType::Gauge => {
                        let ratio = name.ends_with("perc") || name.contains("rate");
                        Child::Gauge(w.known_gauge(name, &labels)?, ratio)
                    }
                    FamilyType::Histogram => {
                        let low = def.buckets.first().copied().unwrap_or(0.0);
                        let high = def.buckets.last().copied().unwrap_or(1.0);
                        Child::Histogram(w.known_histogram(name, &labels)?, low, high)
                    }
                    FamilyType::Summary => Child::Summary(w.known_summary(name, &labels)?),
                };
                self.children.push(child);
            }
        }
        Ok(())
    }

    /// One step: the children appear at the first; every step moves some.
    pub(super) fn step(
        &mut self,
        w: &mut ProcessWriter,
        rng: &mut Rng,
        now: f64,
    ) -> io::Result<()> {
        if self.children.is_empty() {
            self.create(w)?;
        }
        for child in &self.children {
            if !rng.chance(0.3) {
                continue;
            }
            match child {
                Child::Counter(c) => c.inc(w, (1 + rng.below(4096)) as f64)?,
                Child::Gauge(g, true) => g.set_at(w, rng.unit(), now)?,
                Child::Gauge(g, false) => g.set_at(w, rng.below(4) as f64, now)?,
                Child::Histogram(h, low, high) => h.observe(w, rng.uniform(*low, *high))?,
                Child::Summary(s) => s.observe(w, rng.unit() * 1e4)?,
            }
        }
        Ok(())
    }
}
