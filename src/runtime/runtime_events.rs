//! What the daemon loop makes of the runtime's event stream
//! ([`qosd_node::cri::events`]): whether the last listing still holds (the
//! stream is live, was live before that listing started, and no event came
//! since), when to relist, and which state change to log. Pure: the loop
//! feeds it the stream's [`Feed`] and tells it when listings start and end.
use qosd_node::cri::events::Feed;

/// The stream's state as logged and shown in `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventsState {
    /// Live: a timer tick with no event since the last listing lists nothing.
    Live,
    /// Not live (not yet, ended, failed): every reconcile lists, as without events.
    Down,
    /// The runtime does not serve containerd's events API (e.g. CRI-O).
    Unsupported,
}

/// What a new [`Feed`] asks of the loop.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct FeedUpdate {
    /// Relist soon (debounced): the stream became live, or an event came.
    pub(crate) relist: bool,
    /// The state changed from the last one reported (log it once).
    pub(crate) became: Option<EventsState>,
    /// Containers updated in place since the last feed: ask their status
    /// again (`forget_all`: more than the feed kept, ask every container).
    pub(crate) updated: Vec<String>,
    pub(crate) forget_all: bool,
}

/// The loop's side of the event stream.
#[derive(Debug, Default)]
pub(crate) struct EventGate {
    /// The last feed seen.
    live: bool,
    epoch: u64,
    changes: u64,
    updates: u64,
    /// The (epoch, changes) at which a listing in progress started (`None`:
    /// none, or the stream was not live when it started).
    started: Option<(u64, u64)>,
    /// The (epoch, changes) the last completed listing is guarded at.
    guarded: Option<(u64, u64)>,
    /// The last state reported.
    reported: Option<EventsState>,
}

impl EventGate {
    /// Take in a new feed value.
    pub(crate) fn observe(&mut self, f: &Feed) -> FeedUpdate {
        let mut u = FeedUpdate::default();
        if f.live && (!self.live || f.epoch != self.epoch) {
            // Live again (a new subscription): what was listed before
            // it is not guarded; list now that every change is on it.
            u.relist = true;
        }
        if f.changes != self.changes {
            u.relist = true;
        }
        let new_updates = f.updates.saturating_sub(self.updates);
        if new_updates > 0 {
            let n = usize::try_from(new_updates).unwrap_or(usize::MAX);
            if n > f.updated.len() {
                u.forget_all = true;
            } else {
                u.updated = f.updated[f.updated.len() - n..].to_vec();
            }
        }
        self.live = f.live;
        self.epoch = f.epoch;
        self.changes = f.changes;
        self.updates = f.updates;
        let state = if f.live {
            Some(EventsState::Live)
        } else if f.unsupported {
            Some(EventsState::Unsupported)
        } else if f.down.is_some() {
            Some(EventsState::Down)
        } else {
            // Not tried yet: nothing to report.
            None
        };
        if state.is_some() && state != self.reported {
            self.reported = state;
            u.became = state;
        }
        u
    }

    /// A listing (the change check and what follows) starts now.
    pub(crate) fn listing_started(&mut self) {
        self.started = self.live.then_some((self.epoch, self.changes));
    }

    /// The listing started last completed: it is guarded by the stream
    /// if the stream was live when it started.
    pub(crate) fn listing_done(&mut self) {
        self.guarded = self.started.take();
    }

    /// The listing failed: nothing is guarded.
    pub(crate) fn listing_failed(&mut self) {
        self.started = None;
        self.guarded = None;
    }

    /// Whether the last listing still holds: the stream is live, was live
    /// (the same subscription) when that listing started, and no event
    /// came since.
    pub(crate) fn quiet(&self) -> bool {
        self.live && self.guarded == Some((self.epoch, self.changes))
    }

    /// The epoch of the live subscription (`None`: the stream is not live).
    pub(crate) fn live_epoch(&self) -> Option<u64> {
        self.live.then_some(self.epoch)
    }

    /// The state last reported (`None`: no attempt ended yet).
    #[cfg(test)]
    pub(crate) fn state(&self) -> Option<EventsState> {
        self.reported
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(live: bool, epoch: u64, changes: u64) -> Feed {
        Feed {
            live,
            epoch,
            changes,
            down: (!live).then(|| "down".to_string()),
            ..Feed::default()
        }
    }

    #[test]
    fn nothing_is_guarded_before_the_stream_is_live_and_listed() {
        let mut g = EventGate::default();
        assert!(!g.quiet());
        // A listing while not live guards nothing.
        g.listing_started();
        g.listing_done();
        assert!(!g.quiet());
        // Live: relist; the listing from before still guards nothing.
        let u = g.observe(&feed(true, 1, 0));
        assert!(u.relist);
        assert_eq!(u.became, Some(EventsState::Live));
        assert!(!g.quiet());
        g.listing_started();
        g.listing_done();
        assert!(g.quiet());
    }

    #[test]
    fn an_event_unguards_until_the_next_listing() {
        let mut g = EventGate::default();
        g.observe(&feed(true, 1, 0));
        g.listing_started();
        g.listing_done();
        assert!(g.quiet());
        let u = g.observe(&feed(true, 1, 1));
        assert!(u.relist);
        assert_eq!(u.became, None, "still live: nothing to log");
        assert!(!g.quiet());
        g.listing_started();
        g.listing_done();
        assert!(g.quiet());
    }

    #[test]
    fn an_event_during_a_listing_leaves_it_unguarded() {
        let mut g = EventGate::default();
        g.observe(&feed(true, 1, 0));
        g.listing_started();
        g.observe(&feed(true, 1, 1));
        g.listing_done();
        assert!(!g.quiet(), "the listing may predate the change");
    }

    #[test]
    fn a_new_subscription_unguards_what_the_old_one_guarded() {
        let mut g = EventGate::default();
        g.observe(&feed(true, 1, 5));
        g.listing_started();
        g.listing_done();
        assert!(g.quiet());
        let u = g.observe(&feed(false, 1, 5));
        assert_eq!(u.became, Some(EventsState::Down));
        assert!(!g.quiet());
        // Down again with another reason: not logged again.
        assert_eq!(g.observe(&feed(false, 1, 5)).became, None);
        // Changes lost while down; the new epoch forces a relist.
        let u = g.observe(&feed(true, 2, 5));
        assert!(u.relist);
        assert_eq!(u.became, Some(EventsState::Live));
        assert!(!g.quiet());
        g.listing_started();
        g.listing_done();
        assert!(g.quiet());
        // A listing started under epoch 2 while epoch 3 came in between.
        g.listing_started();
        g.observe(&feed(false, 2, 5));
        g.observe(&feed(true, 3, 5));
        g.listing_done();
        assert!(!g.quiet());
    }

    #[test]
    fn a_failed_listing_guards_nothing() {
        let mut g = EventGate::default();
        g.observe(&feed(true, 1, 0));
        g.listing_started();
        g.listing_done();
        g.listing_started();
        g.listing_failed();
        assert!(!g.quiet());
    }

    #[test]
    fn unsupported_is_reported_once_and_nothing_before_the_first_attempt() {
        let mut g = EventGate::default();
        assert_eq!(g.observe(&Feed::default()).became, None);
        assert_eq!(g.state(), None);
        let f = Feed {
            unsupported: true,
            down: Some("Unimplemented".into()),
            ..Feed::default()
        };
        assert_eq!(g.observe(&f).became, Some(EventsState::Unsupported));
        assert_eq!(g.observe(&f).became, None);
        assert!(!g.quiet());
    }

    #[test]
    fn updated_containers_are_named_or_all_forgotten() {
        let mut g = EventGate::default();
        let mut f = feed(true, 1, 0);
        g.observe(&f);
        f.changes = 2;
        f.updates = 2;
        f.updated = vec!["a".into(), "b".into()];
        let u = g.observe(&f);
        assert_eq!(u.updated, vec!["a".to_string(), "b".to_string()]);
        assert!(!u.forget_all);
        f.changes = 3;
        f.updates = 3;
        f.updated.push("c".into());
        assert_eq!(g.observe(&f).updated, vec!["c".to_string()]);
        // More updates than the feed keeps.
        f.updates = 10;
        let u = g.observe(&f);
        assert!(u.forget_all);
        assert!(u.updated.is_empty());
    }
}
