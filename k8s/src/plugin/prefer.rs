//! GetPreferredAllocation: which IDs the kubelet should pick. A container below a whole card
//! gets all its core IDs on one card, and its memory IDs on the same card; a request of
//! 100·n gets n whole cards. The card is the one the scheduler extender recorded for the pod
//! ([`super::admitting`]) where there is one; else the fullest that fits, so that whole cards
//! stay free.

use crate::ids::{DeviceId, Resource, CORES_PER_GPU};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The card chosen for one resource of a container, waiting for the other resource's call.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The resource already chosen.
    pub resource: Resource,
    /// Its card.
    pub uuid: String,
    /// When.
    pub at: Instant,
}

/// How long a choice waits for its pair: the kubelet asks for a container's resources one
/// right after the other.
const PAIRING: Duration = Duration::from_secs(5);

/// One container's request.
#[derive(Debug, Clone)]
pub struct Ask {
    /// IDs the kubelet may give.
    pub available: Vec<String>,
    /// IDs it must give.
    pub must_include: Vec<String>,
    /// How many.
    pub size: usize,
}

/// What the plugin knows of the cards' free core IDs, from the kubelet's own lists: when a
/// container's memory is asked first, its card should be one where its core will fit too.
#[derive(Debug, Default, Clone)]
pub struct CoreView {
    /// Free core IDs per card, as of the last core request, less what was chosen since.
    pub free: BTreeMap<String, usize>,
    /// The size of the last core request below a whole card: containers of one workload
    /// tend to ask alike.
    pub last_size: usize,
}

impl CoreView {
    /// Takes in a core request and the IDs chosen for it.
    pub fn saw(&mut self, ask: &Ask, chosen: &[String]) {
        self.free.clear();
        for text in ask.available.iter().filter(|t| !chosen.contains(t)) {
            if let Ok(id) = DeviceId::parse(text) {
                if id.resource == Resource::Core {
                    *self.free.entry(id.uuid).or_default() += 1;
                }
            }
        }
        if !crate::ids::is_whole(ask.size) {
            self.last_size = ask.size;
        }
    }

    /// Whether a container like the last one would find its core on `uuid`; true when
    /// nothing is known yet.
    pub fn room(&self, uuid: &str) -> bool {
        self.free.is_empty() || self.free.get(uuid).copied().unwrap_or(0) >= self.last_size.max(1)
    }
}

/// What points a request at a card, strongest first.
#[derive(Clone, Copy)]
pub struct Hints<'a> {
    /// The cards the scheduler recorded for the container's pod; empty when none.
    pub scheduled: &'a [String],
    /// The card the container's other resource just got.
    pub paired: Option<&'a str>,
    /// Whether a card has room for the core of a container like the last one.
    pub room: &'a dyn Fn(&str) -> bool,
}

impl Hints<'_> {
    /// No hint: the fullest card that fits.
    pub fn none() -> Hints<'static> {
        Hints {
            scheduled: &[],
            paired: None,
            room: &|_| true,
        }
    }
}

/// The IDs to prefer for `ask` of `resource`, and the card they are on (for pairing): on the
/// scheduled cards where they fit, else on the paired card where it fits, else on the
/// fullest card that fits. A memory request not paired with its core yet goes, where it
/// can, to a card with `room` for the core.
pub fn choose(
    resource: Resource,
    ask: &Ask,
    card_order: &[String],
    hints: Hints,
) -> (Vec<String>, Option<String>) {
    let Hints {
        scheduled,
        paired,
        room,
    } = hints;
    // Available IDs by card, each list by number; IDs not ours are left to the kubelet.
    let mut by_card: BTreeMap<&str, Vec<(u32, &String)>> = BTreeMap::new();
    for text in &ask.available {
        if let Ok(id) = DeviceId::parse(text) {
            if id.resource == resource {
                let uuid = card_order
                    .iter()
                    .find(|u| **u == id.uuid)
                    .map(String::as_str);
                if let Some(uuid) = uuid {
                    by_card.entry(uuid).or_default().push((id.number, text));
                }
            }
        }
    }
    for ids in by_card.values_mut() {
        ids.sort_unstable();
    }
    let must: Vec<&String> = ask.must_include.iter().collect();
    let must_cards: Vec<String> = must
        .iter()
        .filter_map(|t| DeviceId::parse(t).ok().map(|id| id.uuid))
        .collect();
    let whole = resource == Resource::Core && crate::ids::is_whole(ask.size);
    if whole {
        // Whole cards: every card with all its core IDs free, the must-include ones first.
        let mut cards: Vec<&str> = by_card
            .iter()
            .filter(|(_, ids)| ids.len() == CORES_PER_GPU as usize)
            .map(|(uuid, _)| *uuid)
            .collect();
        cards.sort_by_key(|uuid| {
            (
                !must_cards.iter().any(|m| m == uuid),
                !scheduled.iter().any(|m| m == uuid),
            )
        });
        let wanted = ask.size / CORES_PER_GPU as usize;
        if cards.len() >= wanted {
            let ids = cards[..wanted]
                .iter()
                .flat_map(|uuid| by_card[uuid].iter().map(|(_, t)| (*t).clone()))
                .collect();
            return (ids, None);
        }
        return (fallback(ask), None);
    }
    if resource == Resource::Memory && scheduled.len() > 1 {
        // The memory of a pod of several whole cards: on those cards, which the scheduler
        // counts as wholly taken, never on a card others share.
        let on_scheduled: Vec<&String> = scheduled
            .iter()
            .filter_map(|uuid| by_card.get(uuid.as_str()))
            .flatten()
            .map(|(_, text)| *text)
            .collect();
        if on_scheduled.len() >= ask.size && must_cards.iter().all(|m| scheduled.contains(m)) {
            let mut chosen: Vec<String> = must.iter().map(|t| (*t).clone()).collect();
            for text in on_scheduled {
                if chosen.len() >= ask.size {
                    break;
                }
                if !chosen.contains(text) {
                    chosen.push(text.clone());
                }
            }
            return (chosen, None);
        }
    }
    // One card: the paired one if it fits, else the fullest that fits; it must hold every
    // must-include ID.
    let fits = |uuid: &str| {
        by_card.get(uuid).is_some_and(|ids| ids.len() >= ask.size)
            && must_cards.iter().all(|m| m == uuid)
    };
    let fullest = |with_room: bool| {
        by_card
            .iter()
            .filter(|(uuid, _)| fits(uuid))
            .filter(|(uuid, _)| !with_room || room(uuid))
            .min_by_key(|(uuid, ids)| {
                (
                    ids.len(),
                    card_order
                        .iter()
                        .position(|u| u == *uuid)
                        .unwrap_or(usize::MAX),
                )
            })
            .map(|(uuid, _)| uuid.to_string())
    };
    let card = match scheduled {
        [one] if fits(one) => Some(one.as_str()),
        _ => None,
    }
    .or(paired.filter(|uuid| fits(uuid)))
    .map(str::to_string)
    .or_else(|| {
        let with_room = resource == Resource::Memory && paired.is_none();
        fullest(with_room).or_else(|| fullest(false))
    });
    let Some(card) = card else {
        return (fallback(ask), None);
    };
    let mut chosen: Vec<String> = must.iter().map(|t| (*t).clone()).collect();
    for (_, text) in &by_card[card.as_str()] {
        if chosen.len() >= ask.size {
            break;
        }
        if !chosen.contains(text) {
            chosen.push((*text).clone());
        }
    }
    (chosen, Some(card))
}

/// When no card fits: the must-include IDs and then the first available, which is what the
/// kubelet would do; Allocate then says what is wrong.
fn fallback(ask: &Ask) -> Vec<String> {
    let mut chosen = ask.must_include.clone();
    for id in &ask.available {
        if chosen.len() >= ask.size {
            break;
        }
        if !chosen.contains(id) {
            chosen.push(id.clone());
        }
    }
    chosen
}

/// Takes the other resource's recent choice, or leaves this one for it.
pub fn pair(slot: &mut Option<Pending>, resource: Resource, now: Instant) -> Option<String> {
    match slot.take() {
        Some(p) if p.resource != resource && now.duration_since(p.at) < PAIRING => Some(p.uuid),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(uuid: &str, resource: Resource, numbers: std::ops::Range<u32>) -> Vec<String> {
        DeviceId::texts(uuid, resource, numbers)
    }

    /// GPU-a empty, GPU-b with 40 core IDs free; a core request of `size`.
    fn empty_and_partly_used(size: usize) -> (Vec<String>, Ask) {
        let mut available = ids("GPU-a", Resource::Core, 0..100);
        available.extend(ids("GPU-b", Resource::Core, 60..100));
        let ask = Ask {
            available,
            must_include: vec![],
            size,
        };
        (vec!["GPU-a".to_string(), "GPU-b".to_string()], ask)
    }

    #[test]
    fn a_share_lands_on_the_fullest_card_that_fits() {
        let (order, ask) = empty_and_partly_used(30);
        let (chosen, card) = choose(Resource::Core, &ask, &order, Hints::none());
        assert_eq!(card.as_deref(), Some("GPU-b"));
        assert_eq!(chosen, ids("GPU-b", Resource::Core, 60..90));
        // Paired with a memory choice on GPU-a, it goes there.
        let (chosen, card) = choose(
            Resource::Core,
            &ask,
            &order,
            Hints {
                paired: Some("GPU-a"),
                ..Hints::none()
            },
        );
        assert_eq!(card.as_deref(), Some("GPU-a"));
        assert_eq!(chosen.len(), 30);
        // Too big for GPU-b: GPU-a.
        let ask = Ask { size: 50, ..ask };
        assert_eq!(
            choose(Resource::Core, &ask, &order, Hints::none())
                .1
                .as_deref(),
            Some("GPU-a")
        );
    }

    #[test]
    fn the_scheduled_card_comes_first_where_it_fits() {
        let (order, ask) = empty_and_partly_used(30);
        let scheduled = ["GPU-a".to_string()];
        let hints = Hints {
            scheduled: &scheduled,
            paired: Some("GPU-b"),
            ..Hints::none()
        };
        // GPU-b is the fullest and the paired card; the scheduler's record wins.
        let (chosen, card) = choose(Resource::Core, &ask, &order, hints);
        assert_eq!(card.as_deref(), Some("GPU-a"));
        assert_eq!(chosen, ids("GPU-a", Resource::Core, 0..30));
        // A record that does not fit any more is passed over.
        let ask = Ask { size: 50, ..ask };
        let scheduled = ["GPU-b".to_string()];
        let hints = Hints {
            scheduled: &scheduled,
            ..Hints::none()
        };
        assert_eq!(
            choose(Resource::Core, &ask, &order, hints).1.as_deref(),
            Some("GPU-a")
        );
        // Whole cards: the recorded ones, not the first free ones.
        let order: Vec<String> = ["GPU-a", "GPU-b", "GPU-c"].map(String::from).into();
        let available: Vec<String> = order
            .iter()
            .flat_map(|u| ids(u, Resource::Core, 0..100))
            .collect();
        let ask = Ask {
            available,
            must_include: vec![],
            size: 100,
        };
        let scheduled = ["GPU-c".to_string()];
        let hints = Hints {
            scheduled: &scheduled,
            ..Hints::none()
        };
        let (chosen, _) = choose(Resource::Core, &ask, &order, hints);
        assert_eq!(chosen, ids("GPU-c", Resource::Core, 0..100));
    }

    #[test]
    fn memory_asked_first_goes_where_the_core_will_fit() {
        let order = vec!["GPU-a".to_string(), "GPU-b".to_string()];
        // GPU-a has more memory in use (so it is the fullest) but only 10 core IDs left.
        let mut core = ids("GPU-a", Resource::Core, 90..100);
        core.extend(ids("GPU-b", Resource::Core, 0..100));
        let mut view = CoreView::default();
        let earlier = Ask {
            available: core.clone(),
            must_include: vec![],
            size: 30,
        };
        let (chosen, _) = choose(Resource::Core, &earlier, &order, Hints::none());
        view.saw(&earlier, &chosen);
        let mut memory = ids("GPU-a", Resource::Memory, 20..40);
        memory.extend(ids("GPU-b", Resource::Memory, 4..40));
        let ask = Ask {
            available: memory,
            must_include: vec![],
            size: 4,
        };
        let card_with = |view: &CoreView| {
            let room = |uuid: &str| view.room(uuid);
            let hints = Hints {
                room: &room,
                ..Hints::none()
            };
            choose(Resource::Memory, &ask, &order, hints).1
        };
        assert_eq!(card_with(&view).as_deref(), Some("GPU-b"));
        // Knowing nothing of the cores, the fullest.
        assert_eq!(card_with(&CoreView::default()).as_deref(), Some("GPU-a"));
    }

    #[test]
    fn the_memory_of_several_whole_cards_stays_on_them() {
        let order: Vec<String> = ["GPU-a", "GPU-b", "GPU-c"].map(String::from).into();
        let available: Vec<String> = order
            .iter()
            .flat_map(|u| ids(u, Resource::Memory, 0..40))
            .collect();
        let ask = Ask {
            available,
            must_include: vec![],
            size: 60,
        };
        let scheduled = ["GPU-b".to_string(), "GPU-c".to_string()];
        let hints = Hints {
            scheduled: &scheduled,
            ..Hints::none()
        };
        let (chosen, _) = choose(Resource::Memory, &ask, &order, hints);
        assert_eq!(chosen.len(), 60);
        assert!(
            chosen.iter().all(|id| !id.starts_with("GPU-a-")),
            "{chosen:?}"
        );
    }

    #[test]
    fn hundreds_are_whole_cards() {
        let order = vec!["GPU-a".to_string(), "GPU-b".to_string()];
        let mut available = ids("GPU-a", Resource::Core, 1..100);
        available.extend(ids("GPU-b", Resource::Core, 0..100));
        let ask = Ask {
            available,
            must_include: vec![],
            size: 100,
        };
        let (chosen, _) = choose(Resource::Core, &ask, &order, Hints::none());
        assert_eq!(chosen, ids("GPU-b", Resource::Core, 0..100));
    }

    #[test]
    fn pairs_last_only_a_moment_and_only_across_resources() {
        let now = Instant::now();
        let mut slot = Some(Pending {
            resource: Resource::Core,
            uuid: "GPU-a".into(),
            at: now,
        });
        assert_eq!(pair(&mut slot.clone(), Resource::Core, now), None);
        assert_eq!(
            pair(&mut slot, Resource::Memory, now).as_deref(),
            Some("GPU-a")
        );
        assert!(slot.is_none());
        let mut old = Some(Pending {
            resource: Resource::Core,
            uuid: "GPU-a".into(),
            at: now,
        });
        assert_eq!(pair(&mut old, Resource::Memory, now + PAIRING), None);
    }
}
