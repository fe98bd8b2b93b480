//! The queue between the push collector and one destination's sender,
//! bounded in collections (`--push.queue-capacity`) and in bytes
//! (`--push.queue-max-bytes`), whatever the outage's length and the
//! temporality: remote write and cumulative OTLP collections wait as the
//! compressed request they are sent as, delta collections as their
//! cumulative request gzipped with the runs their deltas start from
//! (`otlp::Stored`, the runs shared by the collections that hold the same).
//!
//! The collector drops the oldest waiting collections to stay within the
//! bounds (counted by reason, logged once per episode); never the newest,
//! and never the one the sender is sending, or has sent when the receiver
//! may have stored it (no answer within `--push.timeout`, a connection
//! lost): it is sent again identical until it is answered. With delta temporality nothing a drop
//! loses is a value: the next collection sent carries the change, taken
//! from what the receiver accepted.

use std::collections::VecDeque;
use std::sync::Mutex;

use axum::body::Bytes;
use tokio::sync::Notify;

use super::metrics::{DestinationMetrics, DropReason};
use super::protocol::Protocol;
use crate::expose::otlp;

/// One collection, encoded, waiting to be sent.
#[derive(Debug, Clone)]
pub(super) struct Batch {
    /// Order of the collection (tells a batch apart after the queue moved).
    pub(super) seq: u64,
    pub(super) payload: Payload,
    /// Its samples (for a delta collection, its points before conversion).
    pub(super) samples: usize,
}

/// What a batch sends.
#[derive(Debug, Clone)]
pub(super) enum Payload {
    /// The request body, as it is sent.
    Encoded(Bytes),
    /// An OTLP delta collection (compressed), converted when it is sent
    /// against what the receiver accepted (`otlp::Deltas`, owned by the
    /// sender).
    Delta(otlp::Stored),
}

impl Batch {
    /// Its memory besides its runs: the compressed request.
    fn body_bytes(&self) -> usize {
        match &self.payload {
            Payload::Encoded(body) => body.len(),
            Payload::Delta(stored) => stored.body_bytes(),
        }
    }

    /// Its runs' memory and identity (delta collections).
    fn runs(&self) -> Option<(usize, *const ())> {
        match &self.payload {
            Payload::Encoded(_) => None,
            Payload::Delta(stored) => Some(stored.runs_bytes()),
        }
    }
}

/// The bounded queue between the collector and one destination's sender.
#[derive(Debug)]
pub(super) struct Queue {
    items: Mutex<Items>,
    protocol: Protocol,
    capacity: usize,
    max_bytes: usize,
    /// A batch was queued.
    pub(super) queued: Notify,
}

#[derive(Debug, Default)]
pub(super) struct Items {
    pub(super) batches: VecDeque<Batch>,
    /// Whether collections were dropped for the capacity since the last
    /// success (logged once).
    overflowing: bool,
    /// Whether collections were dropped for the bytes since the last
    /// success (logged once).
    over_bytes: bool,
    /// The receiver asked to wait (`Retry-After`) and has not accepted a
    /// request since: a new collection replaces the waiting ones.
    pub(super) asked_to_wait: bool,
    /// The front batch the sender has taken: never dropped nor replaced
    /// until it is answered.
    pub(super) attempted: Option<u64>,
}

impl Items {
    /// The queue's memory: the batches' compressed requests and their runs
    /// (counted once for consecutive batches sharing them).
    pub(super) fn bytes(&self) -> usize {
        let mut bytes = 0;
        let mut previous: Option<*const ()> = None;
        for batch in &self.batches {
            bytes += batch.body_bytes();
            if let Some((runs, id)) = batch.runs() {
                if previous != Some(id) {
                    bytes += runs;
                }
                previous = Some(id);
            }
        }
        bytes
    }

    /// The memory of the largest batch (its runs counted whole).
    #[cfg(test)]
    pub(super) fn largest(&self) -> usize {
        self.batches
            .iter()
            .map(|b| b.body_bytes() + b.runs().map_or(0, |r| r.0))
            .max()
            .unwrap_or(0)
    }

    /// The batches that may be dropped (all but the one attempted).
    fn waiting(&self) -> usize {
        self.batches.len() - usize::from(self.attempted_index().is_some())
    }

    fn attempted_index(&self) -> Option<usize> {
        let seq = self.attempted?;
        self.batches.iter().position(|b| b.seq == seq)
    }

    /// Drops the oldest waiting batch; its samples.
    fn drop_oldest_waiting(&mut self) -> Option<usize> {
        let i = match self.attempted_index() {
            Some(0) => 1,
            _ => 0,
        };
        self.batches.remove(i).map(|b| b.samples)
    }
}

impl Queue {
    pub(super) fn new(protocol: Protocol, capacity: usize, max_bytes: usize) -> Self {
        Self {
            items: Mutex::new(Items::default()),
            protocol,
            capacity: capacity.max(1),
            max_bytes,
            queued: Notify::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Items> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `batch`: first dropping the waiting ones while the receiver
    /// asked to wait, then the oldest waiting ones beyond the capacity and
    /// the bytes (never `batch` itself, nor the one attempted).
    pub(super) fn push(&self, batch: Batch, metrics: &DestinationMetrics) {
        let mut items = self.lock();
        if items.asked_to_wait {
            // No queue growth while the receiver asked to wait: the newest
            // collection replaces the waiting ones (a delta collection's
            // change is carried: it is taken from what the receiver
            // accepted).
            while items.waiting() > 0 {
                if let Some(samples) = items.drop_oldest_waiting() {
                    metrics.dropped(DropReason::Superseded, samples);
                }
            }
        }
        items.batches.push_back(batch);
        while items.waiting() > self.capacity {
            if !self.drop_oldest(&mut items, DropReason::QueueFull, metrics) {
                break;
            }
        }
        while items.waiting() > 1 && items.bytes() > self.max_bytes {
            if !self.drop_oldest(&mut items, DropReason::MemoryLimit, metrics) {
                break;
            }
        }
        Self::measure(&items, metrics);
        drop(items);
        self.queued.notify_one();
    }

    /// Drops the oldest waiting batch for `reason` (a full queue, or its
    /// bytes), logging the first drop of an episode; whether one was.
    fn drop_oldest(
        &self,
        items: &mut Items,
        reason: DropReason,
        metrics: &DestinationMetrics,
    ) -> bool {
        let Some(samples) = items.drop_oldest_waiting() else {
            return false;
        };
        metrics.dropped(reason, samples);
        let logged = match reason {
            DropReason::MemoryLimit => &mut items.over_bytes,
            _ => &mut items.overflowing,
        };
        if !std::mem::replace(logged, true) {
            match reason {
                DropReason::MemoryLimit => tracing::warn!(
                    protocol = self.protocol.label(),
                    queue_max_bytes = self.max_bytes,
                    "The push queue reached --push.queue-max-bytes: dropping the oldest collections until the receiver takes them again."
                ),
                _ => tracing::warn!(
                    protocol = self.protocol.label(),
                    queue_capacity = self.capacity,
                    "The push queue is full: dropping the oldest collections until the receiver takes them again."
                ),
            }
        }
        true
    }

    /// The front batch, taken by the sender (kept until it is answered).
    pub(super) fn take_front(&self) -> Option<Batch> {
        let mut items = self.lock();
        let front = items.batches.front().cloned();
        items.attempted = front.as_ref().map(|b| b.seq);
        front
    }

    /// Removes the batch `seq` the sender is done with; `accepted`: the
    /// receiver took it (the episodes of drops are over).
    pub(super) fn remove(&self, seq: u64, accepted: bool, metrics: &DestinationMetrics) {
        let mut items = self.lock();
        items.attempted = None;
        if let Some(i) = items.batches.iter().position(|b| b.seq == seq) {
            items.batches.remove(i);
        }
        if accepted {
            items.overflowing = false;
            items.over_bytes = false;
        }
        items.asked_to_wait = false;
        Self::measure(&items, metrics);
    }

    /// The sender waits before sending the front batch again. `stored`:
    /// the receiver may have stored it (no answer within the timeout, a
    /// connection lost): it stays, to be sent again identical; otherwise
    /// (an answer refused it) it may be dropped or replaced like any waiting
    /// one. `asked_to_wait`: the receiver asked to wait (a `Retry-After`
    /// above 0, as capped).
    pub(super) fn wait(&self, stored: bool, asked_to_wait: bool) {
        let mut items = self.lock();
        if !stored {
            items.attempted = None;
        }
        items.asked_to_wait = asked_to_wait;
    }

    /// Everything left (at the end of the flush).
    pub(super) fn drain(&self, metrics: &DestinationMetrics) -> Vec<Batch> {
        let mut items = self.lock();
        items.attempted = None;
        let left = items.batches.drain(..).collect();
        Self::measure(&items, metrics);
        left
    }

    fn measure(items: &Items, metrics: &DestinationMetrics) {
        metrics.set_queue_length(items.batches.len());
        metrics.set_queue_bytes(items.bytes());
    }
}
