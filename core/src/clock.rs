//! What a capture's packet times say of the clock that stamped them, found as the packets are
//! read: its step (a clock of whole milliseconds, or a Windows clock ticking every 15.625 ms,
//! puts every packet a multiple of its step from the first), and every packet the same
//! interval after the one before (as a script that writes a capture spaces them; the analysis
//! calls such times set, not measured, where they hold a TCP conversation both ways, which no
//! real stack answers on one beat). Either leaves waits unmeasured, which the analysis says.

/// Fewer packets than this say nothing of their clock: a few packets a whole number of seconds
/// apart may have been sent so. (On a microsecond clock, eight packets fall whole milliseconds
/// apart by chance once in 10^21 captures.)
const MIN_PACKETS: u64 = 8;
/// Three packets at one instant are already more than a clock that ticks can give.
const SAME_TIME_MIN_PACKETS: u64 = 3;
/// A step from this on is reported.
const COARSE_STEP_US: u64 = 1_000;
/// Intervals from this on, all equal to within `EVEN_SPACING_SHARE` of the shortest, are set.
const MIN_EVEN_SPACING_US: u64 = 1_000;
/// How far the intervals of set times may differ: the writer's own rounding (a capture made by
/// a script whose every packet comes 200 ms after the last: 199.994-200.014 ms).
const EVEN_SPACING_SHARE: f64 = 0.001;

/// The packets' times seen so far, in file order.
#[derive(Default)]
pub struct Clock {
    packets: u64,
    first_us: i64,
    last_us: i64,
    /// Differences are unsigned: a damaged record's time may lie anywhere in an i64.
    step_us: u64,
    shortest_interval_us: u64,
    longest_interval_us: u64,
}

impl Clock {
    pub fn see(&mut self, time_us: i64) {
        self.packets += 1;
        if self.packets == 1 {
            (self.first_us, self.last_us) = (time_us, time_us);
            self.shortest_interval_us = u64::MAX;
            return;
        }
        if self.step_us != 1 {
            self.step_us = gcd(self.step_us, time_us.abs_diff(self.first_us));
        }
        let interval = time_us.abs_diff(self.last_us);
        self.shortest_interval_us = self.shortest_interval_us.min(interval);
        self.longest_interval_us = self.longest_interval_us.max(interval);
        self.last_us = time_us;
    }

    /// The clock's step, where it is 1 ms or more and enough packets show it.
    pub fn coarse_step_us(&self) -> Option<u64> {
        (self.step_us >= COARSE_STEP_US && self.packets >= MIN_PACKETS).then_some(self.step_us)
    }

    /// The interval every packet came after the one before, where all are the same (the
    /// shortest; the others within `EVEN_SPACING_SHARE` of it).
    pub fn even_spacing_us(&self) -> Option<u64> {
        let shortest = self.shortest_interval_us;
        let spread = self.longest_interval_us.saturating_sub(shortest);
        (self.packets >= MIN_PACKETS
            && shortest >= MIN_EVEN_SPACING_US
            && spread as f64 <= EVEN_SPACING_SHARE * shortest as f64)
            .then_some(shortest)
    }

    /// The capture's warning about its clock's step, if any (the analysis words an even
    /// spacing, which it judges).
    pub fn warning(&self) -> Option<String> {
        if self.step_us == 0 && self.packets >= SAME_TIME_MIN_PACKETS {
            return Some(format!(
                "all {} packets carry the same timestamp: no delay can be measured",
                self.packets
            ));
        }
        self.coarse_step_us().map(|step_us| {
            format!(
                "timestamps step by {}: delays and round trips shorter than that are not \
                 seen, and each time is off by up to that much",
                duration_text(step_us)
            )
        })
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A duration in words: "15.625 ms", "1 s".
fn duration_text(us: u64) -> String {
    let (value, decimals, unit) = if us < 1_000_000 {
        (us as f64 / 1e3, 3, "ms")
    } else {
        (us as f64 / 1e6, 6, "s")
    };
    let text = format!("{value:.decimals$}");
    format!(
        "{} {unit}",
        text.trim_end_matches('0').trim_end_matches('.')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock(times: &[i64]) -> Clock {
        let mut clock = Clock::default();
        times.iter().for_each(|&time| clock.see(time));
        clock
    }

    /// Steps worked out by hand from the times given.
    #[test]
    fn steps() {
        let ticks: Vec<i64> = (0..8).map(|k| 822_000 + 15_625 * k * (k % 3 + 1)).collect();
        assert_eq!(clock(&ticks).coarse_step_us(), Some(15_625));
        assert!(
            clock(&ticks)
                .warning()
                .unwrap()
                .starts_with("timestamps step by 15.625 ms:")
        );
        let seconds: Vec<i64> = (0..8).map(|k| -5_000_000 + 1_000_000 * k * k).collect();
        assert!(
            clock(&seconds)
                .warning()
                .unwrap()
                .starts_with("timestamps step by 1 s:")
        );
        assert_eq!(clock(&seconds[..7]).warning(), None);
        assert!(
            clock(&[7; 3])
                .warning()
                .unwrap()
                .starts_with("all 3 packets")
        );
        assert_eq!(clock(&[7; 2]).warning(), None);
        let mut micro = ticks.clone();
        micro.push(822_001);
        assert_eq!(clock(&micro).warning(), None);
        assert_eq!(duration_text(2_500_000), "2.5 s");
    }

    /// zeek/pop3-unknown-commands.pcap's intervals (199.994-200.014 ms); the same with one
    /// interval off by a millisecond; whole seconds apart (a step, not set times).
    #[test]
    fn even_spacing() {
        let intervals = [
            200_014, 199_995, 200_007, 199_996, 199_994, 200_008, 199_999, 199_998,
        ];
        let mut times = vec![1_000_000];
        for interval in intervals {
            times.push(times[times.len() - 1] + interval);
        }
        assert_eq!(clock(&times).even_spacing_us(), Some(199_994));
        assert_eq!(clock(&times).warning(), None);
        times[4] += 1_000;
        assert_eq!(clock(&times).even_spacing_us(), None);
        let seconds: Vec<i64> = (0..8).map(|k| 1_000_000 * k * (k % 2 + 1)).collect();
        assert_eq!(clock(&seconds).even_spacing_us(), None);
        let beat: Vec<i64> = (0..8).map(|k| 500_000 * k).collect();
        assert_eq!(clock(&beat).even_spacing_us(), Some(500_000));
    }

    /// Damaged records' times anywhere in an i64: no overflow, whatever they say.
    #[test]
    fn any_times() {
        let times = [
            i64::MIN,
            i64::MAX,
            0,
            -1,
            1,
            i64::MIN + 1,
            i64::MAX - 1,
            7,
            i64::MIN,
        ];
        for length in 1..=times.len() {
            let seen = clock(&times[..length]);
            let _ = (
                seen.warning(),
                seen.even_spacing_us(),
                seen.coarse_step_us(),
            );
        }
    }
}
