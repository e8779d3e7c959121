//! The putter: one segment put, run on the mirror's runtime, its outcome reported back to the uploader.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use crate::mirror::remote::Remote;
use crate::types::Epoch;

use super::progress::Progress;
use super::uploader::{SegmentPut, encode_put};

/// A putter thread: puts the segments the uploader hands it, one at a time, and reports each landing (the
/// progress acknowledges them in slot order).
pub(super) struct Putter {
    pub(super) remote: Arc<Remote>,
    pub(super) progress: Arc<Progress>,
    pub(super) epoch: Epoch,
    pub(super) writer_tag: u128,
}

impl Putter {
    pub(super) fn run(self, puts: &Mutex<mpsc::Receiver<SegmentPut>>) {
        loop {
            // One putter waits on the channel at a time; the others wait for the lock.
            let next = puts.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok(put) = next else { return };
            if self.progress.failed() {
                continue;
            }
            match encode_put(&self.remote, &put, self.epoch, self.writer_tag, false) {
                Ok(_) => self.progress.landed(put.last_ticket, put.slot, put.cut),
                Err(failure) => self.progress.fail(failure),
            }
        }
    }
}
