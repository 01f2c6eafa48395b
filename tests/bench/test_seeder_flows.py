"""bench.seeder_flows' pure parts: reading `ss`, summing a host's connections, when a share ended, the pusher's
idle time. (The push itself needs network namespaces: the lab's own tests cover that path.)"""

import pytest

from bench.seeder_flows import (
    below_full,
    idle_before,
    link_use,
    parse_ss,
    per_host,
    rates,
    reached,
    share_ends,
    summary,
)

SS = """Recv-Q Send-Q Local Address:Port  Peer Address:Port Process
17     114715   10.0.0.2:36269 10.0.0.15:34345
\t cubic wscale:10,10 rto:320 mss:1448 bytes_sent:1048888 bytes_retrans:20272 bytes_acked:692764 bytes_received:921
0      0        10.0.0.2:50128  10.0.0.1:52877
\t cubic wscale:10,10 rto:204 bytes_sent:91774 bytes_acked:91775 bytes_received:12576
0      0        [::1]:8080  [::1]:41000
\t cubic rto:204 bytes_received:10
"""


def test_parse_ss_takes_each_connections_acked_bytes_and_skips_one_without():
    assert parse_ss(SS) == {"10.0.0.2:36269>10.0.0.15:34345": 692764, "10.0.0.2:50128>10.0.0.1:52877": 91775}


@pytest.mark.parametrize("text", ["", "Recv-Q Send-Q Local Address:Port Peer Address:Port\n",
                                  "garbage\n\t bytes_acked:5"])
def test_parse_ss_of_nothing_is_nothing(text):
    assert parse_ss(text) == {}


def test_per_host_sums_connections_keeps_a_closed_ones_bytes_and_leaves_out_unknown_peers():
    names = {"10.0.0.15": "r1h1", "10.0.0.16": "r1h2"}
    samples = [
        (1.0, {"s:1>10.0.0.15:5": 100, "s:1>10.0.0.16:6": 50, "s:2>10.0.0.1:7": 999}),
        (2.0, {"s:1>10.0.0.15:5": 300, "s:1>10.0.0.15:9": 10, "s:1>10.0.0.16:6": 80}),
        (3.0, {"s:1>10.0.0.15:9": 40}),  # the first connection to r1h1 and r1h2's closed: their bytes stay
    ]
    assert per_host(samples, names) == {"r1h1": [(1.0, 100), (2.0, 310), (3.0, 340)],
                                        "r1h2": [(1.0, 50), (2.0, 80), (3.0, 80)]}


def test_share_ends_when_a_flow_last_grew():
    flows = {"a": [(0.0, 0), (1.0, 5), (2.0, 9), (3.0, 9)], "b": [(0.0, 0), (1.0, 4), (2.0, 4), (3.0, 4)]}
    assert share_ends(flows) == {"a": 2.0, "b": 1.0}


def test_rates_per_interval_and_time_below_full():
    flows = {"a": [(0.0, 0), (1.0, 10), (2.0, 20), (3.0, 25), (4.0, 25)],
             "b": [(0.0, 0), (1.0, 10), (2.0, 20), (3.0, 20), (4.0, 20)]}
    rows = rates(flows)
    assert rows == [(0.0, {"a": 10.0, "b": 10.0}), (1.0, {"a": 10.0, "b": 10.0}), (2.0, {"a": 5.0, "b": 0.0}),
                    (3.0, {"a": 0.0, "b": 0.0})]
    assert rates(flows, every=2) == [(0.0, {"a": 10.0, "b": 10.0}), (2.0, {"a": 2.5, "b": 0.0})]
    # best 20/s: the interval at 5/s counts, up to the last byte (3.0); the one after it does not
    assert below_full(rows, until=3.0) == 1.0
    assert below_full(rows[:1], until=3.0) == 0.0


def test_reached_is_the_first_sample_with_that_much_acknowledged_in_all():
    flows = {"a": [(0.0, 0), (0.5, 40), (1.0, 90)], "b": [(0.0, 0), (0.5, 30), (1.0, 60)]}
    assert reached(flows, 1) == 0.5 and reached(flows, 70) == 0.5 and reached(flows, 71) == 1.0
    assert reached(flows, 151) is None and reached({}, 1) is None


def test_summary_of_a_push_whose_flows_ss_did_not_show_says_so():
    report = {"size": 8 << 20, "mtu": 1500, "interval_s": 0.5, "flows": {}, "bound": {"seconds": 6.76},
              "result": {"makespan_s": 9.5, "finish_s": {"r1h1": 9.5}}}
    assert "no connection of the pusher's was seen" in summary(report)


def test_summary_names_the_first_bytes_and_the_shares():
    flows = {"a": [(0.0, 0), (0.5, 70_000), (1.0, 600_000), (1.5, 600_000)],
             "b": [(0.0, 0), (0.5, 0), (1.0, 500_000), (1.5, 900_000)]}
    report = {"size": 1 << 20, "mtu": 9000, "interval_s": 0.5, "flows": flows, "bound": {"seconds": 1.0},
              "reconcile_s": 2.0, "result": {"makespan_s": 2.0, "finish_s": {"a": 1.8, "b": 2.0}}}
    text = summary(report)
    assert "first 64 KiB acknowledged at 0.50 s, its first MB at 1.00 s (the agents' period 2 s)" in text
    assert "share complete (s): a 1.0, b 1.5" in text and "MTU 9000" in text


def test_link_use_per_interval_and_time_below_busy_before_a_moment():
    samples = [(0.0, {"r1": 0, "r2": 0}), (1.0, {"r1": 1000, "r2": 500}), (2.0, {"r1": 1950, "r2": 1500}),
               (3.0, {"r1": 2100, "r2": 2500})]
    use = link_use(samples, rate=1000.0)
    assert use == [(0.0, 1.0, {"r1": 1.0, "r2": 0.5}), (1.0, 2.0, {"r1": 0.95, "r2": 1.0}),
                   (2.0, 3.0, {"r1": 0.15, "r2": 1.0})]
    assert link_use(samples, rate=1000.0, every=2) == [(0.0, 2.0, {"r1": 0.975, "r2": 0.75})]
    # below 90 %: r2 in its first second, r1 in its third (counted up to `until`)
    assert idle_before(use, 3.0) == {"r1": 1.0, "r2": 1.0}
    assert idle_before(use, 2.5) == {"r1": 0.5, "r2": 1.0}
    assert idle_before(use, 0.5) == {"r1": 0.0, "r2": 0.5}


def test_summary_shows_each_rack_downlink_and_when_it_idled():
    flows = {"a": [(0.0, 0), (0.5, 70_000), (1.0, 600_000), (1.5, 600_000)]}
    downlinks = [(0.0, {"r1": 0}), (0.5, {"r1": 500}), (1.0, {"r1": 600}), (1.5, {"r1": 1100}), (2.0, {"r1": 1600})]
    report = {"size": 1 << 20, "mtu": 1500, "interval_s": 0.5, "flows": flows, "bound": {"seconds": 1.0},
              "result": {"makespan_s": 2.0, "finish_s": {"a": 2.0}}, "rack_downlinks": downlinks,
              "rack_uplinks": [(0.0, {"r1": 0}), (0.5, {"r1": 0})], "link_rate": 1000.0}
    text = summary(report)
    assert "each rack's uplink" not in text  # (too few samples to say anything)
    assert "each rack's downlink, use of its rate" in text
    assert "before the pusher's last byte (s): r1 0.5" in text  # 0.5-1.0 s at 0.2 of its rate
    assert "to the last host's finish (s): r1 0.0" in text  # (1.0-2.0 s at its full rate)
