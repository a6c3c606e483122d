"""Connection rules on hand-built packets: wrap-around, port reuse, missing handshake, TSO."""

from __future__ import annotations

from nagledetect import load_capture
from tests.handbuilt import CLIENT, SERVER, segment, write

ISN_NEAR_WRAP = 0xFFFFFF00  # 256 bytes before the 32-bit sequence space wraps
SERVER_ISN = 5000


def _handshake(sport: int, client_isn: int, start_s: float, mss: int = 1460) -> list:
    return [
        segment(CLIENT, SERVER, sport, 80, "S", client_isn, time_s=start_s,
                options=[("MSS", mss)]),
        segment(SERVER, CLIENT, 80, sport, "SA", SERVER_ISN, client_isn + 1, time_s=start_s + 0.001,
                options=[("MSS", mss)]),
        segment(CLIENT, SERVER, sport, 80, "A", client_isn + 1, SERVER_ISN + 1, time_s=start_s + 0.002),
    ]


def test_sequence_numbers_unwrap_across_the_32_bit_boundary(tmp_path) -> None:
    packets = _handshake(40000, ISN_NEAR_WRAP, 1.0)
    for index in range(3):  # 3 x 200 bytes: relative 1, 201, 401; the second crosses the wrap
        seq = ISN_NEAR_WRAP + 1 + 200 * index
        packets.append(segment(CLIENT, SERVER, 40000, 80, "PA", seq, SERVER_ISN + 1, 200,
                               time_s=1.01 + index * 0.01))
        packets.append(segment(SERVER, CLIENT, 80, 40000, "A", SERVER_ISN + 1, seq + 200,
                               time_s=1.015 + index * 0.01))
    capture = load_capture(str(write(tmp_path / "wrap.pcap", packets)))
    data = capture.packets[capture.packets["payload_bytes"] > 0]
    acks = capture.packets[(capture.packets["direction"] == 1) & (capture.packets["role"] == "pure_ack")]
    assert data["rel_seq"].tolist() == [1, 201, 401]
    assert acks["rel_ack"].tolist() == [201, 401, 601]
    assert (data["role"] == "data").all()


def test_new_syn_after_fin_on_the_same_four_tuple_is_a_new_connection(tmp_path) -> None:
    first = _handshake(40001, 1000, 1.0) + [
        segment(CLIENT, SERVER, 40001, 80, "FA", 1001, SERVER_ISN + 1, time_s=1.1),
        segment(SERVER, CLIENT, 80, 40001, "FA", SERVER_ISN + 1, 1002, time_s=1.2),
    ]
    retried_syn = [segment(CLIENT, SERVER, 40001, 80, "S", 90000, time_s=2.0)]
    second = _handshake(40001, 90000, 3.0)
    capture = load_capture(str(write(tmp_path / "reuse.pcap", first + retried_syn + second)))
    assert len(capture.connections) == 2
    assert capture.packets["connection"].tolist() == [0] * 5 + [1] * 4
    assert capture.connections["syn_frame"].tolist() == [1, 6]


def test_reused_four_tuples_are_numbered_by_first_packet_among_others(tmp_path) -> None:
    """Pair A closes and comes back after pair B began, so A's second lifetime is connection 2
    while B's later packets stay connection 1; pair C's SYN sent again with the same ISN is a
    retransmission, not a new lifetime. Expected numbers written out by hand, packet by packet."""
    a_first = _handshake(40010, 1000, 1.0) + [
        segment(CLIENT, SERVER, 40010, 80, "FA", 1001, SERVER_ISN + 1, time_s=1.1),
        segment(SERVER, CLIENT, 80, 40010, "FA", SERVER_ISN + 1, 1002, time_s=1.2),
    ]
    b_start = _handshake(40011, 7000, 1.5)
    a_second = _handshake(40010, 50000, 3.0)
    b_later = [segment(CLIENT, SERVER, 40011, 80, "PA", 7001, SERVER_ISN + 1, 10, time_s=3.5)]
    c_syns = [segment(CLIENT, SERVER, 40012, 80, "S", 300, time_s=4.0),
              segment(CLIENT, SERVER, 40012, 80, "S", 300, time_s=5.0)]
    capture = load_capture(str(write(tmp_path / "interleaved.pcap",
                                     a_first + b_start + a_second + b_later + c_syns)))
    assert capture.packets["connection"].tolist() == [0] * 5 + [1] * 3 + [2] * 3 + [1] + [3] * 2
    assert capture.connections["client_port"].tolist() == [40010, 40011, 40010, 40012]
    assert capture.connections["first_frame"].tolist() == [1, 6, 9, 13]


def test_without_handshake_the_client_is_the_ephemeral_port_and_mss_is_estimated(tmp_path) -> None:
    timestamps = [("Timestamp", (1, 1))]
    packets = []
    for index in range(4):  # the server (port 80) sends first, full 1448-byte segments
        packets.append(segment(SERVER, CLIENT, 80, 51000, "A", 7000 + 1448 * index, 300, 1448,
                               time_s=1.0 + index * 0.001, options=timestamps))
    packets.append(segment(CLIENT, SERVER, 51000, 80, "A", 300, 7000 + 1448 * 4, time_s=1.01,
                           options=timestamps))
    capture = load_capture(str(write(tmp_path / "midstream.pcap", packets)))
    connection = capture.connections.iloc[0]
    assert connection["client_port"] == 51000 and connection["server_port"] == 80
    assert bool(connection["client_guessed"])
    assert bool(connection["mss_estimated"]) and connection["effective_mss"] == 1448
    assert capture.packets["rel_seq"].tolist()[:4] == [1, 1449, 2897, 4345]
    assert capture.packets["rel_ack"].tolist()[4] == 5793


def test_payload_longer_than_the_mss_is_a_super_segment(tmp_path) -> None:
    packets = _handshake(40002, 1, 1.0) + [
        segment(CLIENT, SERVER, 40002, 80, "PA", 2, SERVER_ISN + 1, 5000, time_s=1.01),
        segment(CLIENT, SERVER, 40002, 80, "PA", 5002, SERVER_ISN + 1, 100, time_s=1.02),
    ]
    capture = load_capture(str(write(tmp_path / "tso.pcap", packets)))
    data = capture.packets[capture.packets["payload_bytes"] > 0]
    assert capture.connections["effective_mss"].tolist() == [1460]
    assert data["wire_segments"].tolist() == [4, 1]  # ceil(5000 / 1460) = 4
    assert data["super_segment"].tolist() == [True, False]


def test_a_capture_with_one_direction_only_still_numbers_acks(tmp_path) -> None:
    packets = [segment(CLIENT, SERVER, 52000, 443, "PA", 100 + 10 * i, 9000, 10, time_s=1 + i)
               for i in range(3)]
    capture = load_capture(str(write(tmp_path / "oneway.pcap", packets)))
    assert capture.packets["rel_seq"].tolist() == [1, 11, 21]
    assert capture.packets["rel_ack"].tolist() == [1, 1, 1]
    assert capture.connections["packets_server_to_client"].tolist() == [0]
