//! Why a packet was not used: the codes of `nagledetect/read/skips.py`, which names each in the
//! report.

pub const KEPT: i64 = 0;
pub const TRUNCATED_LINK_HEADER: i64 = 1;
pub const TRUNCATED_IP_HEADER: i64 = 2;
pub const BAD_IP_HEADER: i64 = 3;
pub const IPV4_FRAGMENT: i64 = 4;
pub const IPV6_FRAGMENT: i64 = 5;
pub const IPV6_EXTENSION_CHAIN: i64 = 6;
pub const TRUNCATED_TCP_HEADER: i64 = 7;
pub const BAD_TCP_HEADER_LENGTH: i64 = 8;
pub const BAD_PPPOE_HEADER: i64 = 10;
pub const WLAN_NO_DATA: i64 = 11;
pub const WLAN_PROTECTED: i64 = 12;
pub const WLAN_FRAGMENT: i64 = 13;
pub const WLAN_AGGREGATE: i64 = 14;
pub const BAD_RADIOTAP_HEADER: i64 = 15;
pub const IP_PROTOCOL_BASE: i64 = 1_000;
pub const PPP_PROTOCOL_BASE: i64 = 10_000;
pub const ETHERTYPE_BASE: i64 = 100_000;
pub const LINK_TYPE_BASE: i64 = 1_000_000;
