//! The policy arithmetic: from the containers on one GPU, their policies,
//! priorities and whether they have work, each one's share of the GPU's time and whether it
//! is blocked. Pure functions, no region in sight, so that every case is a unit test.

use crate::policy::{ComputePolicy, Priority};

/// The whole GPU, in parts per million.
pub const WHOLE_PPM: u32 = 1_000_000;

/// One container on one GPU, as the scheduler sees it at a tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// Its compute policy.
    pub policy: ComputePolicy,
    /// Its priority.
    pub priority: Priority,
    /// Whether it has work: launches running, waiting, or just raised `active`.
    pub demanding: bool,
}

/// What the scheduler decides for one container on one GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Its share of the GPU now, in ppm: 0 when it has no work or is blocked.
    pub share_ppm: u32,
    /// The share it gets the moment it has work (its refill rate while idle, so that its
    /// first launch after idle finds tokens): equal to `share_ppm` when it has work. When
    /// blocked, its guarantee if it is `fixed:Q` (it earns its share while online work
    /// runs and catches up once it stops, so that over time it gets Q of the GPU's time),
    /// else 0.
    pub rate_ppm: u32,
    /// Offline, while online work runs on the GPU.
    pub blocked: bool,
}

/// Whether online work on the GPU blocks the offline containers: any online container has
/// work.
pub fn online_busy(claims: &[Claim]) -> bool {
    claims
        .iter()
        .any(|c| c.demanding && c.priority == Priority::Online)
}

/// Each container's share of the GPU, in `claims`' order.
///
/// Among the containers that have work and are not blocked: `fixed:Q` gets Q, never more;
/// `burst:Q` gets Q plus an equal part of the leftover; `best-effort` an equal part of the
/// leftover, where the leftover is 100 less the guarantees of those fixed and burst
/// containers, split equally among those burst and best-effort ones. While any online
/// container has work the offline ones are blocked and count for nothing. A container
/// without work gets share 0, and as rate the share it would get if it had work now.
pub fn decide(claims: &[Claim]) -> Vec<Decision> {
    let busy = online_busy(claims);
    let blocked = |c: &Claim| busy && c.priority == Priority::Offline;
    let runnable: Vec<usize> = (0..claims.len())
        .filter(|&i| claims[i].demanding && !blocked(&claims[i]))
        .collect();
    let shares = split(claims, &runnable);
    claims
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if blocked(c) {
                return Decision {
                    share_ppm: 0,
                    rate_ppm: match c.policy {
                        ComputePolicy::Fixed(q) => u32::from(q.min(100)) * (WHOLE_PPM / 100),
                        _ => 0,
                    },
                    blocked: true,
                };
            }
            if let Some(k) = runnable.iter().position(|&r| r == i) {
                return Decision {
                    share_ppm: shares[k],
                    rate_ppm: shares[k],
                    blocked: false,
                };
            }
            // Idle: what it would get if it joined the runnable ones now.
            let mut with = runnable.clone();
            with.push(i);
            let rate = *split(claims, &with).last().expect("one pushed");
            Decision {
                share_ppm: 0,
                rate_ppm: rate,
                blocked: false,
            }
        })
        .collect()
}

/// The shares of `members` (indices into `claims`), in their order, all of them having work.
fn split(claims: &[Claim], members: &[usize]) -> Vec<u32> {
    let ppm = |q: u8| u32::from(q.min(100)) * (WHOLE_PPM / 100);
    // The config refuses guarantees over 100 per GPU; clamp anyway so that a bad sum
    // (an adopted region, a race with a change) cannot overflow the whole.
    let guaranteed: u32 = members
        .iter()
        .map(|&i| match claims[i].policy {
            ComputePolicy::Fixed(q) | ComputePolicy::Burst(q) => ppm(q),
            ComputePolicy::BestEffort => 0,
        })
        .sum::<u32>()
        .min(WHOLE_PPM);
    let sharers = members
        .iter()
        .filter(|&&i| !matches!(claims[i].policy, ComputePolicy::Fixed(_)))
        .count() as u32;
    let part = (WHOLE_PPM - guaranteed).checked_div(sharers).unwrap_or(0);
    members
        .iter()
        .map(|&i| match claims[i].policy {
            ComputePolicy::Fixed(q) => ppm(q),
            ComputePolicy::Burst(q) => (ppm(q) + part).min(WHOLE_PPM),
            ComputePolicy::BestEffort => part,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ComputePolicy::{BestEffort, Burst, Fixed};
    use Priority::{Offline, Online};

    fn busy(policy: ComputePolicy) -> Claim {
        Claim {
            policy,
            priority: Online,
            demanding: true,
        }
    }

    fn shares(claims: &[Claim]) -> Vec<u32> {
        decide(claims)
            .iter()
            .map(|d| d.share_ppm / 10_000)
            .collect()
    }

    #[test]
    fn fixed_burst_and_best_effort_split_20_55_25() {
        let claims = [busy(Fixed(20)), busy(Burst(30)), busy(BestEffort)];
        assert_eq!(shares(&claims), [20, 55, 25]);
    }

    #[test]
    fn burst_alone_gets_the_whole_gpu() {
        assert_eq!(shares(&[busy(Burst(30))]), [100]);
    }

    #[test]
    fn burst_beside_fixed_keeps_the_rest() {
        assert_eq!(shares(&[busy(Burst(30)), busy(Fixed(50))]), [50, 50]);
    }

    #[test]
    fn four_best_effort_get_a_quarter_each() {
        assert_eq!(shares(&[busy(BestEffort); 4]), [25, 25, 25, 25]);
    }

    #[test]
    fn fixed_never_gets_more_than_its_share() {
        assert_eq!(shares(&[busy(Fixed(30))]), [30]);
        assert_eq!(shares(&[busy(Fixed(30)), busy(Fixed(20))]), [30, 20]);
    }

    #[test]
    fn offline_is_blocked_while_online_has_work() {
        let online = busy(BestEffort);
        let offline = Claim {
            priority: Offline,
            ..busy(BestEffort)
        };
        let d = decide(&[online, offline]);
        assert!(!d[0].blocked && d[1].blocked);
        assert_eq!((d[0].share_ppm, d[1].share_ppm), (WHOLE_PPM, 0));
        assert_eq!(d[1].rate_ppm, 0);

        // Online idle: offline runs at once, with the whole GPU.
        let idle = Claim {
            demanding: false,
            ..online
        };
        let d = decide(&[idle, offline]);
        assert!(!d[0].blocked && !d[1].blocked);
        assert_eq!(d[1].share_ppm, WHOLE_PPM);
        // The idle online one keeps the rate it would get beside the offline one.
        assert_eq!((d[0].share_ppm, d[0].rate_ppm), (0, WHOLE_PPM / 2));
        assert!(!online_busy(&[idle, offline]));
    }

    #[test]
    fn an_offline_guarantee_gives_way_too() {
        let online = busy(Fixed(20));
        let offline = Claim {
            priority: Offline,
            ..busy(Burst(50))
        };
        let d = decide(&[online, offline]);
        assert_eq!(d[0].share_ppm, 200_000);
        assert!(d[1].blocked);
        assert_eq!(d[1].rate_ppm, 0, "a blocked burst container earns nothing");
    }

    #[test]
    fn a_blocked_fixed_container_earns_its_share_to_catch_up() {
        let online = busy(Burst(50));
        let job = Claim {
            priority: Offline,
            ..busy(Fixed(20))
        };
        let d = decide(&[online, job]);
        assert!(d[1].blocked);
        assert_eq!((d[1].share_ppm, d[1].rate_ppm), (0, 200_000));
    }

    #[test]
    fn idle_containers_get_the_rate_they_would_have() {
        let idle = |policy| Claim {
            demanding: false,
            ..busy(policy)
        };
        let d = decide(&[busy(Fixed(20)), idle(Burst(30)), idle(BestEffort)]);
        assert_eq!(d[0].share_ppm, 200_000);
        // Burst joining fixed:20 alone: 30 + the leftover 50.
        assert_eq!((d[1].share_ppm, d[1].rate_ppm), (0, 800_000));
        assert_eq!((d[2].share_ppm, d[2].rate_ppm), (0, 800_000));
    }

    #[test]
    fn overbooked_guarantees_do_not_overflow() {
        let d = decide(&[busy(Fixed(100)), busy(Burst(100)), busy(BestEffort)]);
        assert!(d.iter().all(|d| d.share_ppm <= WHOLE_PPM));
        assert_eq!(d[2].share_ppm, 0);
    }
}
