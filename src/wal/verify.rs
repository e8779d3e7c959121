//! Checking the local log end to end: every frame in order, as a reader of the log (the mirror, a restore)
//! will meet it. Opening the store never reads the whole log; this is the explicit, on-demand check.
//!
//! Checked, in this order, for each entry of table `log` from `meta.log_start`:
//! the entry's key is the next sequence number (the log is dense, no gap); the frame decodes (length, version,
//! reserved bytes, CRC32, no trailing bytes); the frame's own sequence number equals its key; its epoch is not
//! below the previous frame's nor above the store's; its payload is one valid record. Finally, the log must end
//! just before `meta.next_seq`.

use redb::{ReadTransaction, ReadableTable};

use crate::error::Error;
use crate::wal::frame::decode_exact;
use crate::wal::record::Record;
use crate::wal::tables::{LOG, META, read_meta};

/// Verifies every frame of the local log; returns how many there are, or a [`crate::ErrorKind::Corrupt`]
/// error naming the first bad sequence number.
pub(crate) fn verify_log(txn: &ReadTransaction) -> Result<u64, Error> {
    let meta = read_meta(&txn.open_table(META)?, &txn.open_table(LOG)?)?
        .ok_or_else(|| Error::corrupt("table meta is empty"))?;
    let log = txn.open_table(LOG)?;
    let mut expected = meta.log_start;
    let mut epoch = 0;
    for entry in log.iter()? {
        let (key, value) = entry?;
        let seq = key.value();
        if seq != expected {
            return Err(Error::corrupt(format!(
                "table log: seq {expected} is missing (the next frame is seq {seq}; the log starts at {})",
                meta.log_start
            )));
        }
        let place = format!("table log, seq {seq}");
        let frame = decode_exact(value.value(), &place)?;
        if frame.seq != seq {
            return Err(Error::corrupt(format!("{place}: the frame says it is seq {}", frame.seq)));
        }
        if frame.epoch < epoch || frame.epoch > meta.epoch {
            return Err(Error::corrupt(format!(
                "{place}: epoch {} after epoch {epoch}, in a store of epoch {}",
                frame.epoch, meta.epoch
            )));
        }
        epoch = frame.epoch;
        Record::from_payload(frame.payload, &place)?;
        expected += 1;
    }
    if expected != meta.next_seq {
        return Err(Error::corrupt(format!(
            "table log ends before seq {expected}, but table meta says the next seq is {}",
            meta.next_seq
        )));
    }
    Ok(expected - meta.log_start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::CommitSequence;
    use crate::types::{JobId, TargetIdentity};
    use crate::wal::frame::encode;
    use crate::wal::tables::{Meta, STORE_FORMAT_VERSION, create_all, encode_meta};
    use redb::ReadableDatabase as _;

    /// A database whose log holds `frames` (seq, epoch) and whose meta says the log is `log_start..next_seq`.
    fn db(frames: &[(u64, u64)], log_start: u64, next_seq: u64) -> redb::Database {
        let db = redb::Builder::new().create_with_backend(redb::backends::InMemoryBackend::new()).unwrap();
        let txn = db.begin_write().unwrap();
        create_all(&txn).unwrap();
        let meta = Meta {
            format_version: STORE_FORMAT_VERSION,
            job: JobId::new("j").unwrap(),
            target: TargetIdentity::new("t").unwrap(),
            epoch: 2,
            writer_tag: 0,
            next_seq,
            log_start,
            seq: CommitSequence { next_key: 0, in_flight: None },
            finished: false,
        };
        txn.open_table(META).unwrap().insert("meta", encode_meta(&meta).unwrap().as_slice()).unwrap();
        {
            let mut log = txn.open_table(LOG).unwrap();
            for &(seq, epoch) in frames {
                let payload = Record::Open { writer_tag: 1 }.to_payload().unwrap();
                log.insert(seq, encode(seq, epoch, &payload).unwrap().as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
        db
    }

    fn verify(db: &redb::Database) -> Result<u64, Error> {
        verify_log(&db.begin_read().unwrap())
    }

    #[test]
    fn a_dense_log_from_its_start_is_counted() {
        assert_eq!(verify(&db(&[(5, 1), (6, 1), (7, 2)], 5, 8)).unwrap(), 3);
        assert_eq!(verify(&db(&[], 4, 4)).unwrap(), 0);
    }

    #[test]
    fn a_lost_tail_is_named() {
        // The meta's next seq, 8, is a lower bound (`tables::read_meta`): a log that ends below it lost frames.
        let err = verify(&db(&[(5, 1), (6, 1)], 5, 8)).unwrap_err();
        assert!(err.to_string().contains("table log ends at seq 6"), "{err}");
        // An empty log means the meta was written with it: the log must end just before its next seq.
        let err = verify(&db(&[], 5, 8)).unwrap_err();
        assert!(err.to_string().contains("ends before seq 5"), "{err}");
    }

    #[test]
    fn a_lost_head_is_named() {
        let err = verify(&db(&[(6, 1)], 5, 7)).unwrap_err();
        assert!(err.to_string().contains("seq 5 is missing"), "{err}");
    }

    #[test]
    fn epochs_going_back_or_past_the_store_are_named() {
        let err = verify(&db(&[(0, 2), (1, 1)], 0, 2)).unwrap_err();
        assert!(err.to_string().contains("seq 1: epoch 1 after epoch 2"), "{err}");
        let err = verify(&db(&[(0, 3)], 0, 1)).unwrap_err();
        assert!(err.to_string().contains("seq 0: epoch 3"), "{err}");
    }
}
