//! Serde `with` helpers for byte fields, a leaf below the types that use them: each writes a byte vector as one
//! byte string, so postcard copies it in one go.

/// Serde `with` functions for a `Vec<u8>` field, written and read as one byte string (`serialize_bytes`,
/// `deserialize_byte_buf`) rather than as a sequence of `u8`s: postcard then copies the bytes in one go instead
/// of one call per byte (a 1 MiB write result took a million). postcard encodes both as a varint length and the
/// bytes, so the format does not change (`wal::record::tests::golden_encodings`,
/// `mirror::format::tests::snapshot_entries_golden_encodings`); self-describing formats (JSON) still write an
/// array of numbers, and one is still read.
pub(crate) mod byte_string {
    use std::fmt;

    use serde::{Deserializer, Serializer, de};

    /// Writes `bytes` as one byte string.
    pub(crate) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    /// Reads a byte string, or a sequence of `u8`s.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(ByteString)
    }

    struct ByteString;

    impl<'de> de::Visitor<'de> for ByteString {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a byte string")
        }

        fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
            Ok(bytes.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(bytes)
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            // A hint from the input is not trusted beyond a page: the bytes themselves bound what is allocated.
            let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(byte) = seq.next_element()? {
                bytes.push(byte);
            }
            Ok(bytes)
        }
    }
}

/// Serde helpers that (de)serialize a list of byte vectors (source keys) as a sequence of byte strings: the same
/// postcard bytes as a `Vec<Vec<u8>>` (a varint count, then each as a varint length and its bytes), written and
/// read a key at a time instead of a byte at a time.
pub(crate) mod byte_strings {
    use std::fmt;

    use serde::ser::SerializeSeq;
    use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

    /// One byte string, borrowed for writing.
    struct Bytes<'a>(&'a [u8]);

    impl Serialize for Bytes<'_> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.serialize_bytes(self.0)
        }
    }

    /// One byte string, read.
    struct ByteBuf(Vec<u8>);

    impl<'de> Deserialize<'de> for ByteBuf {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            super::byte_string::deserialize(deserializer).map(ByteBuf)
        }
    }

    /// Writes `items` as a sequence of byte strings (a `Vec` or a slice of them).
    pub(crate) fn serialize<S: Serializer, T: AsRef<[Vec<u8>]>>(items: &T, serializer: S) -> Result<S::Ok, S::Error> {
        let items = items.as_ref();
        let mut seq = serializer.serialize_seq(Some(items.len()))?;
        for item in items {
            seq.serialize_element(&Bytes(item))?;
        }
        seq.end()
    }

    /// Reads a sequence of byte strings.
    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Vec<u8>>, D::Error> {
        deserializer.deserialize_seq(ByteStrings)
    }

    struct ByteStrings;

    impl<'de> de::Visitor<'de> for ByteStrings {
        type Value = Vec<Vec<u8>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence of byte strings")
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Vec<u8>>, A::Error> {
            // A hint from the input is not trusted beyond a page: the items themselves bound what is allocated.
            let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(ByteBuf(item)) = seq.next_element()? {
                items.push(item);
            }
            Ok(items)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Keys(#[serde(with = "byte_strings")] Vec<Vec<u8>>);

    #[test]
    fn byte_strings_are_encoded_as_a_sequence_of_byte_sequences_was() {
        for keys in [vec![], vec![vec![]], vec![vec![0, 1, 255], vec![7; 300], vec![]]] {
            let old = postcard::to_allocvec(&keys).unwrap();
            assert_eq!(postcard::to_allocvec(&Keys(keys.clone())).unwrap(), old);
            assert_eq!(postcard::from_bytes::<Keys>(&old).unwrap(), Keys(keys));
        }
    }

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Blob(#[serde(with = "byte_string")] Vec<u8>);

    #[test]
    fn a_byte_string_is_encoded_as_a_sequence_of_bytes_was() {
        let bytes = vec![0, 1, 255];
        assert_eq!(postcard::to_allocvec(&Blob(bytes.clone())).unwrap(), postcard::to_allocvec(&bytes).unwrap());
        assert_eq!(postcard::from_bytes::<Blob>(&postcard::to_allocvec(&bytes).unwrap()).unwrap(), Blob(bytes));
    }
}
