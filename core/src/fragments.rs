//! IP datagrams sent in fragments, put back together before what they carry is decoded, as
//! Wireshark does: the TCP segment of a fragmented datagram belongs to the frame whose
//! fragment completes it, and the fragments before are skipped as fragments.
//!
//! A fragment is held by its datagram's addresses, identification and protocol until the
//! fragments cover the datagram from its start to the end its last fragment states. Only a
//! fragment captured whole is held (the decoder decodes a first fragment cut by the snapshot
//! length as it stands, as Wireshark does). What is held is bounded: past `MAX_DATAGRAMS`
//! datagrams or `MAX_HELD_BYTES` bytes, the oldest datagram is dropped, as one whose
//! fragments never all came.

use std::collections::VecDeque;

use foldhash::HashMap;

/// Datagrams held at once at most, and bytes of their fragments.
const MAX_DATAGRAMS: usize = 4_096;
const MAX_HELD_BYTES: usize = 16 << 20;
/// An IPv4 datagram's payload cannot reach past this; an IPv6 one's (without a jumbo
/// payload) neither.
const MAX_DATAGRAM_BYTES: usize = 65_535;

/// Which datagram a fragment belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramKey {
    pub ip_version: u8,
    pub src: [u32; 4],
    pub dst: [u32; 4],
    pub identification: u32,
    pub protocol: u8,
}

/// One fragment: where its bytes lie in the datagram's payload, how many the IP header
/// states, whether more follow it.
#[derive(Clone, Copy)]
pub struct Fragment {
    pub offset_bytes: usize,
    pub stated_bytes: usize,
    pub more: bool,
}

impl Fragment {
    pub fn is_first(&self) -> bool {
        self.offset_bytes == 0
    }
}

#[derive(Default)]
struct Datagram {
    /// (offset, bytes) of each fragment held, in arrival order.
    pieces: Vec<(usize, Vec<u8>)>,
    /// The payload's length, once the fragment without "more fragments" has come.
    total_bytes: Option<usize>,
    /// When it was first seen (a count of fragments taken), to drop the oldest.
    first_seen: u64,
}

impl Datagram {
    fn held_bytes(&self) -> usize {
        self.pieces.iter().map(|(_, bytes)| bytes.len()).sum()
    }

    /// Whether the pieces cover the payload from 0 to its stated end.
    fn complete(&self) -> bool {
        let Some(total) = self.total_bytes else {
            return false;
        };
        let mut spans: Vec<(usize, usize)> = self
            .pieces
            .iter()
            .map(|(offset, bytes)| (*offset, offset + bytes.len()))
            .collect();
        spans.sort_unstable();
        let mut covered = 0;
        for (start, end) in spans {
            if start > covered {
                return false;
            }
            covered = covered.max(end);
        }
        covered >= total
    }

    /// The payload put together (later fragments over earlier ones where they overlap).
    fn payload(&self, total: usize) -> Vec<u8> {
        let mut payload = vec![0u8; total];
        for (offset, bytes) in &self.pieces {
            let end = (offset + bytes.len()).min(total);
            if *offset < end {
                payload[*offset..end].copy_from_slice(&bytes[..end - offset]);
            }
        }
        payload
    }
}

/// The datagrams whose fragments have come in part.
#[derive(Default)]
pub struct Fragments {
    datagrams: HashMap<DatagramKey, Datagram>,
    /// Datagrams by when they were first seen, oldest first (some may be gone already).
    order: VecDeque<(u64, DatagramKey)>,
    held_bytes: usize,
    taken: u64,
}

impl Fragments {
    /// Hold a fragment (`bytes`: its payload, captured whole); the datagram's whole payload
    /// when this fragment completes it, else None. A fragment reaching past the largest
    /// payload an IP length can state is dropped.
    pub fn take(&mut self, key: DatagramKey, fragment: Fragment, bytes: &[u8]) -> Option<Vec<u8>> {
        self.taken += 1;
        let end = fragment.offset_bytes.checked_add(fragment.stated_bytes)?;
        if end > MAX_DATAGRAM_BYTES {
            return None;
        }
        let taken = self.taken;
        let order = &mut self.order;
        let datagram = self.datagrams.entry(key).or_insert_with(|| {
            order.push_back((taken, key));
            Datagram {
                first_seen: taken,
                ..Datagram::default()
            }
        });
        let kept = &bytes[..bytes.len().min(fragment.stated_bytes)];
        datagram.pieces.push((fragment.offset_bytes, kept.to_vec()));
        if !fragment.more {
            datagram.total_bytes = Some(end);
        }
        self.held_bytes += kept.len();
        if datagram.complete() {
            let datagram = self.datagrams.remove(&key)?;
            self.held_bytes -= datagram.held_bytes();
            let total = datagram.total_bytes?;
            return Some(datagram.payload(total));
        }
        self.bound();
        None
    }

    /// Drop the oldest datagrams while more are held than the bounds allow, and forget the
    /// order of those gone once they outnumber the ones held.
    fn bound(&mut self) {
        while self.datagrams.len() > MAX_DATAGRAMS || self.held_bytes > MAX_HELD_BYTES {
            let Some((seen, key)) = self.order.pop_front() else {
                return;
            };
            if self
                .datagrams
                .get(&key)
                .is_some_and(|d| d.first_seen == seen)
                && let Some(dropped) = self.datagrams.remove(&key)
            {
                self.held_bytes -= dropped.held_bytes();
            }
        }
        if self.order.len() > 2 * self.datagrams.len() + MAX_DATAGRAMS {
            let datagrams = &self.datagrams;
            self.order
                .retain(|(seen, key)| datagrams.get(key).is_some_and(|d| d.first_seen == *seen));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(identification: u32) -> DatagramKey {
        DatagramKey {
            ip_version: 4,
            src: [0, 0, 0xFFFF, 1],
            dst: [0, 0, 0xFFFF, 2],
            identification,
            protocol: 6,
        }
    }

    fn fragment(offset_bytes: usize, stated_bytes: usize, more: bool) -> Fragment {
        Fragment {
            offset_bytes,
            stated_bytes,
            more,
        }
    }

    #[test]
    fn fragments_in_any_order_complete_their_datagram_at_the_last_to_come() {
        let payload: Vec<u8> = (0..40).collect();
        let mut fragments = Fragments::default();
        assert_eq!(
            fragments.take(key(7), fragment(24, 16, false), &payload[24..]),
            None
        );
        assert_eq!(
            fragments.take(key(8), fragment(0, 24, true), &payload[..24]),
            None
        );
        let whole = fragments.take(key(7), fragment(0, 24, true), &payload[..24]);
        assert_eq!(whole, Some(payload));
        assert_eq!(fragments.datagrams.len(), 1);
        assert_eq!(fragments.held_bytes, 24);
    }

    #[test]
    fn the_oldest_datagrams_go_past_the_bound() {
        let mut fragments = Fragments::default();
        for identification in 0..=MAX_DATAGRAMS as u32 {
            fragments.take(key(identification), fragment(0, 8, true), &[0; 8]);
        }
        assert_eq!(fragments.datagrams.len(), MAX_DATAGRAMS);
        assert!(!fragments.datagrams.contains_key(&key(0)));
        assert_eq!(fragments.held_bytes, 8 * MAX_DATAGRAMS);
        assert_eq!(
            fragments.take(key(1), fragment(65_530, 8, false), &[0; 8]),
            None
        );
    }
}
