//! One queue's claim loop: waits for free slots, claims as many ready jobs as there are free
//! slots in one statement, and hands each to an executor. While claims follow each other back to
//! back it keeps its pool connection ([`HeldConnection`]); under a backlog of short jobs it
//! claims ahead of its free slots ([`ReadAhead`]), and sends the next claim while the jobs
//! claimed ahead still start ([`Starter`] starts them).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jobs_core::JobId;
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::completer;
use super::held_connection::HeldConnection;
use super::read_ahead::{self, PaceMark, ReadAhead};
use super::running::Renewal;
use super::starter::Starter;
use super::watcher::{Idle, QueueWatch};
use super::Shared;
use crate::backoff::ReconnectBackoff;
use crate::store::{
    self, ClaimCount, ClaimLimits, ClaimPlace, ClaimedJob, FairPlace, KeyRound, LimitedClaim,
    Outcome,
};
use jobs_core::RateLimit;

/// What a producer needs to know about the jobs it claims.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePlan {
    /// What it claims: a queue's name, or a limited kind's.
    pub name: String,
    /// How it claims.
    pub claim: Claim,
    /// Jobs run at once.
    pub concurrency: usize,
    /// The queues whose notifications (work may have arrived) wake it.
    pub woken_by: Vec<String>,
}

/// How a producer claims.
#[derive(Debug, Clone, PartialEq)]
pub enum Claim {
    /// Jobs of any of `kinds` from queue `queue`.
    Queue {
        /// The queue.
        queue: String,
        /// The kinds it claims: every kind the worker runs without a running limit.
        kinds: Vec<&'static str>,
        /// The lease of each kind, pairing with `kinds`.
        leases: Vec<Duration>,
    },
    /// Jobs of one kind with a fairness key from queue `queue`, round-robin across their keys.
    Fair {
        /// The kind.
        kind: &'static str,
        /// The queue.
        queue: String,
        /// The kind's lease.
        lease: Duration,
    },
    /// Jobs of one kind with a per-key limit from queue `queue`, within its limits,
    /// round-robin across the limit keys with room.
    KeyLimited {
        /// The kind.
        kind: &'static str,
        /// The queue.
        queue: String,
        /// Its limits: per key, and of the kind as a whole.
        limits: ClaimLimits,
        /// The kind's lease.
        lease: Duration,
    },
    /// Jobs of one kind with a limit on its running jobs or on their rate across all workers,
    /// from any of the worker's queues.
    Limited {
        /// The kind.
        kind: &'static str,
        /// The worker's queues.
        queues: Vec<String>,
        /// Most jobs of the kind running at once across all workers, if limited.
        max_running: Option<u32>,
        /// Most jobs of the kind started in any window of the limit's length across all
        /// workers, if limited.
        rate_limit: Option<RateLimit>,
        /// The kind's lease.
        lease: Duration,
    },
}

impl Claim {
    /// The most jobs its claims may take ahead of the free slots, when the worker's claims take
    /// up to `claim_ahead`: a queue's, a fair kind's, and a kind's with a per-key running limit
    /// alone take that many (the jobs it claims ahead count against the limit from their claim,
    /// as they are running, and leave other keys' room to other workers); a kind with a rate
    /// limit (whose starts are counted at the claim) or a kind-wide running limit (whose room
    /// jobs waiting here would keep from other workers) takes none.
    fn most_ahead(&self, claim_ahead: usize) -> usize {
        match self {
            Claim::Queue { .. } | Claim::Fair { .. } => claim_ahead,
            Claim::KeyLimited { limits, .. }
                if limits.max_running.is_none()
                    && limits.rate_limit.is_none()
                    && limits.rate_limit_per_key.is_none() =>
            {
                claim_ahead
            }
            Claim::KeyLimited { .. } | Claim::Limited { .. } => 0,
        }
    }

    /// Whether its claims read jobs in turn order, from a place in it: a fair kind's, and a
    /// kind's with a per-key running limit and no per-key rate limit (whose claims walk the keys
    /// while a key is at its limit, and then start at the front again).
    fn takes_turns(&self) -> bool {
        match self {
            Claim::Fair { .. } => true,
            Claim::KeyLimited { limits, .. } => limits.rate_limit_per_key.is_none(),
            Claim::Queue { .. } | Claim::Limited { .. } => false,
        }
    }

    /// Claims up to `count` jobs (only a kind-wide limited kind's claims take as many in all,
    /// none ahead of the free slots), from the front of the claim order or `from` a place in it
    /// (a queue's, or one in turn order: see [`Claim::takes_turns`]; a kind-wide limited kind's
    /// claims always start at the front); the claims of a kind with a per-key limit that walk
    /// the keys go on after the key `round` ended at, and move it.
    /// Claims run on the connection `held`, taken from the pool when there is none, and dropped
    /// on an error (see [`HeldConnection`]). Returns, with the claim, when its statement was
    /// sent: the leases it took cannot have begun before then.
    async fn claim(
        &self,
        shared: &Shared,
        count: ClaimCount,
        from: Option<&Place>,
        round: &mut KeyRound,
        held: &mut HeldConnection,
    ) -> Result<(LimitedClaim, Instant), sqlx::Error> {
        let connection = &mut **held.take_or_acquire(&shared.pool).await?;
        let sent_at = Instant::now();
        let wanted = count.free + count.ahead;
        let claimed = match self {
            Claim::Fair { kind, queue, lease } => {
                let after = match from {
                    Some(Place::Fair(place)) => Some(place),
                    _ => None,
                };
                store::claim_fair(connection, queue, kind, *lease, count, after)
                    .await
                    .map(LimitedClaim::unlimited)
            }
            Claim::KeyLimited {
                kind,
                queue,
                limits,
                lease,
            } => {
                round.turn_place = match from {
                    Some(Place::Fair(place)) => Some(place.clone()),
                    _ => None,
                };
                store::claim_key_limited(connection, kind, queue, count, *limits, *lease, round)
                    .await
            }
            Claim::Queue {
                queue,
                kinds,
                leases,
            } => {
                let after = match from {
                    Some(Place::Queue(place)) => Some(*place),
                    _ => None,
                };
                store::claim_ahead(connection, queue, kinds, leases, count, after)
                    .await
                    .map(LimitedClaim::unlimited)
            }
            Claim::Limited {
                kind,
                queues,
                max_running,
                rate_limit,
                lease,
            } => {
                store::claim_limited(
                    connection,
                    kind,
                    queues,
                    wanted,
                    *max_running,
                    *rate_limit,
                    *lease,
                )
                .await
            }
        };
        claimed
            .map(|claim| (claim, sent_at))
            .inspect_err(|_| held.drop_connection())
    }
}

/// Longest a producer claims from where its last claim ended before it looks at the front of
/// the claim order again, while looks at the front are cheap. A claim from that place claims
/// nothing while a job of a higher priority is ready, and the front is looked at in the same
/// round; jobs that go before the place within its priority (committed by a transaction that
/// began before the jobs claimed last, since their `run_at` is that transaction's start, or
/// rescued keeping their `run_at`, or handed back in their place by a worker that had claimed
/// them ahead) wait at most this long while a backlog lasts, or [`front_claim_interval`]'s
/// longer interval when the look at the front is slow.
const FRONT_CLAIM_EVERY: Duration = Duration::from_secs(1);

/// How much longer than a slow look at the front the next one waits: this many times as long as
/// the last one took, when that is longer than [`FRONT_CLAIM_EVERY`] (a look of more than 50 ms),
/// up to [`FRONT_CLAIM_LONGEST_INTERVAL`]. So looks of up to half a second hold the slots about a
/// twenty-first of the time: a look at the front is a claim for free slots, and the producer
/// starts no job while such a claim runs, so a slow look at the front stalls every slot that
/// frees meanwhile. A look at the front passes the index
/// entries of every job claimed since the last vacuum, which a long transaction elsewhere (a
/// held xmin horizon) keeps from even being marked dead: draining 45,000 jobs a second under
/// such a hold, looks at the front took 100 ms (the median) and up to half a second. Lock waits
/// and a slow network make them slow too.
const FRONT_CLAIM_COST_RATIO: u32 = 20;

/// The longest interval between two looks at the front, however slow the last one was.
const FRONT_CLAIM_LONGEST_INTERVAL: Duration = Duration::from_secs(10);

/// How long after a look at the front that took `took` the next one is due.
fn front_claim_interval(took: Duration) -> Duration {
    (took * FRONT_CLAIM_COST_RATIO).clamp(FRONT_CLAIM_EVERY, FRONT_CLAIM_LONGEST_INTERVAL)
}

/// How far back claims in turn order read again: from where the oldest of the producer's last
/// [`RESCAN_CLAIMS`] claims began, among those that returned within the last 100 ms. A job takes
/// its turn from the round the claims recorded when its transaction commits, and becomes visible
/// a moment later (once its commit reaches disk); the claims that run meanwhile cannot see it
/// and go past its turn. The claims after them read that range again and take it, unless its
/// commit took longer than this (a synchronous standby far away, a transaction held open after
/// `SET CONSTRAINTS ALL IMMEDIATE`): it then waits for the next look at the front. Reading again
/// costs the index entries of the jobs claimed in that range, by every producer of the kind,
/// which the first read marks dead unless a long transaction holds the xmin horizon back.
const RESCAN_WINDOW: Duration = Duration::from_millis(100);

/// The most claims back that claims in turn order read again (see [`RESCAN_WINDOW`]).
const RESCAN_CLAIMS: usize = 4;

/// A place in a producer's claim order: a queue's, or one in turn order (a fair kind's, or a
/// per-key limited kind's).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Place {
    /// In the order of a queue's claims ([`ClaimPlace`]).
    Queue(ClaimPlace),
    /// In turn order ([`FairPlace`]).
    Fair(FairPlace),
}

impl Place {
    /// The place of `job`, claimed by a producer that claims as `claim` does: `None` for a job
    /// taken other than in turn order by a producer whose claims take turns (one without a key,
    /// or one a walk of the limit keys took), which has no place in that order, and for a
    /// kind-wide limited kind's, whose claims start at the front.
    fn of(job: &ClaimedJob, claim: &Claim) -> Option<Place> {
        match claim {
            Claim::Queue { .. } => Some(Place::Queue(job.place())),
            Claim::Fair { .. } | Claim::KeyLimited { .. } => job.fair_place().map(Place::Fair),
            Claim::Limited { .. } => None,
        }
    }
}

impl Place {
    /// The priority of the job at this place.
    fn priority(&self) -> i16 {
        match self {
            Place::Queue(place) => place.priority,
            Place::Fair(place) => place.priority,
        }
    }

    /// Where the next claim reads again from when a claim in turn order took its first job at
    /// this place, `before` being the furthest place claimed before it (`None` after a claim from
    /// the front): the place itself, or, when it is the first the producer reached in its turn
    /// (`before` is in an earlier turn, or another priority, or unknown), the start of that turn.
    /// A job committed while the claim ran may have taken that turn with a key before this one:
    /// read from this place, it would be passed. Places in a queue's order stay as they are.
    fn rescan_from(self, before: Option<&Place>) -> Place {
        match (self, before) {
            (Place::Fair(first), Some(Place::Fair(before)))
                if before.priority == first.priority && before.turn == first.turn =>
            {
                Place::Fair(first)
            }
            (Place::Fair(first), _) => Place::Fair(FairPlace {
                key: String::new(),
                id: 0,
                ..first
            }),
            (place, _) => place,
        }
    }
}

/// Where a producer's claims ended, so that the next claim can start there rather than at the
/// front of the ready index, past the entries of every job claimed since the last vacuum.
struct ClaimPosition {
    /// Whether claims can start from a place (a kind-wide limited kind's cannot, nor a per-key
    /// limited kind's under a per-key rate limit, whose claims always walk the keys).
    resumable: bool,
    /// Whether claims start where the recent claims began rather than at the furthest place
    /// (those in turn order; see [`ClaimPosition::resume_point`]).
    rescans_recent_claims: bool,
    /// The furthest place claimed so far.
    last: Option<Place>,
    /// Where the last claims that took jobs began (as [`Place::rescan_from`] gives it), and when
    /// each returned, oldest first: those of the last [`RESCAN_WINDOW`], at most
    /// [`RESCAN_CLAIMS`], all of one priority; the last such claim's at least.
    recent_claims_first: VecDeque<(Instant, Place)>,
    /// When the front is next due a look: [`front_claim_interval`] after the last claim that
    /// started there ended.
    front_due_at: Instant,
}

impl ClaimPosition {
    /// The position of a producer that claims as `claim` does, before its first claim.
    fn new(claim: &Claim) -> Self {
        Self {
            resumable: matches!(claim, Claim::Queue { .. }) || claim.takes_turns(),
            rescans_recent_claims: claim.takes_turns(),
            last: None,
            recent_claims_first: VecDeque::new(),
            front_due_at: Instant::now() + FRONT_CLAIM_EVERY,
        }
    }

    /// Where the next claim starts: after the last place, unless the front is due a look.
    ///
    /// Claims in turn order start where the oldest of the recent claims began instead (see
    /// [`RESCAN_WINDOW`]; the last claim, at least; from the start of its turn when it began a turn: see
    /// [`Place::rescan_from`]): a job enqueued while those claims ran took its turn after the
    /// turns claimed before its commit, which those claims may have passed, not seeing it; the
    /// next claim reads their range again (their jobs' index entries, and any such job), and
    /// goes on.
    fn resume_point(&self) -> Option<Place> {
        if !self.resumable || Instant::now() >= self.front_due_at {
            return None;
        }
        if self.rescans_recent_claims {
            let oldest = self
                .recent_claims_first
                .iter()
                .map(|(_, place)| place)
                .min();
            return oldest.cloned().or_else(|| self.last.clone());
        }
        self.last.clone()
    }

    /// Makes the next claim start at the front: jobs were handed back there, in their places.
    fn rewind(&mut self) {
        self.last = None;
        self.recent_claims_first.clear();
    }

    /// Notes that a claim in turn order that took jobs, returning at `now`, began at `place` (as
    /// [`Place::rescan_from`] gives it), forgetting the claims before it that returned longer
    /// than [`RESCAN_WINDOW`] ago, beyond the last [`RESCAN_CLAIMS`], or of another priority (a
    /// claim from a place reads that place's priority alone).
    fn claim_began(&mut self, place: Place, now: Instant) {
        if self
            .recent_claims_first
            .back()
            .is_some_and(|(_, last)| last.priority() != place.priority())
        {
            self.recent_claims_first.clear();
        }
        self.recent_claims_first.push_back((now, place));
        while self.recent_claims_first.len() > RESCAN_CLAIMS
            || (self.recent_claims_first.len() > 1
                && self.recent_claims_first[0].0 + RESCAN_WINDOW < now)
        {
            self.recent_claims_first.pop_front();
        }
    }

    /// Notes what a claim of a producer that claims as `claim` does took, whether it started at
    /// the front, and how long it `took`.
    ///
    /// A claim from the front took the first claimable jobs of the order, so every job before
    /// the furthest it took is claimed: the next claim may start there, even when that is
    /// before the last place (a higher priority came in). A claim from the front that took
    /// nothing found nothing claimable at all, and leaves the place as it was.
    fn claimed(&mut self, claim: &Claim, jobs: &[ClaimedJob], from_front: bool, took: Duration) {
        let places = || jobs.iter().filter_map(|job| Place::of(job, claim));
        let furthest = places().max();
        if self.rescans_recent_claims {
            if let Some(first) = places().min() {
                let before = self.last.as_ref().filter(|_| !from_front);
                self.claim_began(first.rescan_from(before), Instant::now());
            }
        }
        if from_front {
            self.front_due_at = Instant::now() + front_claim_interval(took);
            if furthest.is_some() {
                self.last = furthest;
            }
        } else {
            self.last = self.last.take().max(furthest);
        }
    }
}

/// Claims and starts jobs of one queue until shutdown is requested; executors are spawned on
/// `executors` so the worker can wait for them.
pub async fn produce(
    shared: Arc<Shared>,
    plan: QueuePlan,
    wake: Arc<Notify>,
    watches: Vec<Arc<QueueWatch>>,
    executors: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(plan.concurrency));
    let mut stop = shared.shutdown_requested.subscribe();
    let mut backoff = ReconnectBackoff::new(shared.config.max_reconnect_delay);
    let all_slots = u32::try_from(plan.concurrency.max(1)).unwrap_or(u32::MAX);
    // Whether the last claim filled every free slot: the queue has more work than slots.
    let mut busy = false;
    let mut position = ClaimPosition::new(&plan.claim);
    let mut held = HeldConnection::default();
    // Jobs claimed ahead of free slots, and how many a claim may take ahead.
    let mut read_ahead = ReadAhead::default();
    let mut starter = Starter::new(Arc::clone(&shared), executors);
    let claim_ahead = plan.claim.most_ahead(shared.config.claim_ahead);
    // How many jobs the next claim takes beyond the free slots: as many as the slots start
    // within the read-ahead span at their pace, measured once every job of the last claim ended
    // within the claim batch window, or from the starts between two claims while jobs waited
    // (doubled when the jobs waiting ran out before a claim ahead returned); else none.
    let mut ahead = 0;
    // The jobs just handed back, `(id, lease token)`: the next claim waits for their writes.
    let mut handed_back_runs: Option<Vec<(JobId, Uuid)>> = None;
    // The last claim's return, from which the slots' pace is measured.
    let mut pace = PaceMark::new(Instant::now(), 0, 0);
    // Where a kind with a per-key limit stands: where its claims in turn order go on, the key
    // its last walk of the keys ended at, and whether a key is at its limit.
    let mut round = KeyRound::new(shared.config.poll_interval);
    let mut outcomes_written = shared.outcomes_written.subscribe();
    // How long a producer held back with room in its rate window waits before claiming again:
    // the room came back between its claim and its look at the window, or other claims hold
    // the jobs locked; one slice of the window (the grain starts are recorded at) at most, the
    // poll interval when shorter.
    let rate_limits = match &plan.claim {
        Claim::Limited { rate_limit, .. } => [*rate_limit, None],
        Claim::KeyLimited { limits, .. } => [limits.rate_limit, limits.rate_limit_per_key],
        Claim::Queue { .. } | Claim::Fair { .. } => [None, None],
    };
    let held_retry = rate_limits
        .into_iter()
        .flatten()
        .map(|limit| limit.per() / 64)
        .fold(shared.config.poll_interval, Duration::min);
    loop {
        if let Some(runs) = handed_back_runs.take() {
            // Bounded: should the completer be slow to write them, the next look at the front
            // finds them (within a second, or up to 10 s while looks are slow).
            let _ = tokio::time::timeout(
                read_ahead::LONGEST_WAIT,
                handed_back(&shared, &runs, &mut outcomes_written, &mut stop),
            )
            .await;
            // The jobs are back in their places, before where the claims ended (a fair kind's
            // in their turns); a per-key limited kind's keys whose jobs came back get their
            // turns first.
            position.rewind();
            round.handed_back(starter.last_turn());
        }
        // Under a backlog of short jobs the next claim goes out while the jobs claimed ahead
        // still start, once fewer wait than a claim takes ahead: the slots start jobs while it
        // runs. It takes jobs ahead alone (no free slot), so at most twice that many wait. A
        // look at the front is left to a claim for free slots: a claim ahead stops before a job
        // on its last attempt, which would keep the front from being looked at again. (Claims
        // that walk the keys, while one is at its limit, have no front to look at.)
        let from = position.resume_point();
        let next_claim_due = busy
            && ahead > 0
            && !read_ahead.is_empty()
            && read_ahead.len() < ahead
            && (from.is_some() || !position.resumable || round.walks_keys())
            && read_ahead
                .hand_back_at()
                .is_some_and(|at| at > Instant::now())
            && !*stop.borrow()
            && !*shared.abandoned.borrow();
        if next_claim_due {
            let count = ClaimCount { free: 0, ahead };
            let claim = plan
                .claim
                .claim(&shared, count, from.as_ref(), &mut round, &mut held);
            let (claimed, meanwhile) = start_while_claiming(
                claim,
                &shared,
                &slots,
                &mut stop,
                &mut read_ahead,
                &mut starter,
            )
            .await;
            let WhileClaiming {
                mut free_slots,
                stopping,
                handed,
            } = meanwhile;
            match claimed {
                Ok((
                    LimitedClaim {
                        jobs, walked_keys, ..
                    },
                    sent_at,
                )) => {
                    let claimed_at = Instant::now();
                    position.claimed(&plan.claim, &jobs, from.is_none(), claimed_at - sent_at);
                    if walked_keys {
                        position.rewind();
                    }
                    ahead = if jobs.len() < count.ahead {
                        // The jobs ahead ran out, or stopped at a job on its last attempt: the
                        // next claims are made for free slots, until the pace is known again.
                        0
                    } else if !free_slots.is_empty() {
                        // The jobs waiting ran out before the claim returned: the slots start
                        // jobs faster than claims of this size bring them. Twice as many, but
                        // no more than the slots started within the read-ahead span at their
                        // pace meanwhile (a slow claim of slow jobs would otherwise double it
                        // past what starts before the jobs waiting are handed back).
                        let paced = pace.since_taken_in(starter.started(), claimed_at);
                        (ahead * 2).min(paced.max(ahead)).min(claim_ahead)
                    } else {
                        // A job waited for every slot that freed since the last claim's jobs
                        // were taken in: their starts give the slots' pace.
                        pace.since_taken_in(starter.started(), claimed_at)
                            .min(claim_ahead)
                    };
                    if stopping || handed.is_some() || *shared.abandoned.borrow() {
                        free_slots.clear();
                    }
                    let started_before = starter.started();
                    starter.take_in(jobs, sent_at, claimed_at, &mut free_slots, &mut read_ahead);
                    pace = PaceMark::new(claimed_at, started_before, starter.started());
                }
                Err(error) => {
                    ahead = 0;
                    tracing::warn!(queue = plan.name, %error, "claiming ahead failed");
                }
            }
            if let Some(mut runs) = handed {
                ahead = 0;
                held.drop_connection();
                runs.extend(hand_back(&shared, &mut read_ahead).await);
                handed_back_runs = Some(runs);
            }
            continue;
        }
        let hand_back_at = read_ahead.hand_back_at();
        let woken = tokio::select! {
            // In this order: with no batch window the sleep below is ready at once too.
            biased;
            _ = stop.wait_for(|stop| *stop) => Woken::Stop,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => Woken::Slot(permit),
                Err(_) => return,
            },
            // The jobs claimed ahead waited too long for a slot: the jobs running took longer
            // than those before them. Another worker may run them now.
            () = tokio::time::sleep_until(
                hand_back_at.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std)
            ), if hand_back_at.is_some() => Woken::HandBack,
            // Every slot is taken by jobs still running: the claims' connection goes back to
            // the pool (where those jobs may need it) unless a slot frees within the window.
            () = tokio::time::sleep(shared.config.claim_batch_window), if held.is_held() => {
                Woken::SlotsBusy
            }
        };
        let first = match woken {
            Woken::Slot(permit) => permit,
            Woken::Stop => {
                hand_back(&shared, &mut read_ahead).await;
                return;
            }
            Woken::HandBack => {
                ahead = 0;
                // Every slot is busy: the connection goes back to the pool, where the writes
                // of the hand-backs and of the jobs running may need it.
                held.drop_connection();
                handed_back_runs = Some(hand_back(&shared, &mut read_ahead).await);
                continue;
            }
            Woken::SlotsBusy => {
                held.drop_connection();
                continue;
            }
        };
        let mut permits: Vec<OwnedSemaphorePermit> = vec![first];
        let window = shared.config.claim_batch_window;
        if read_ahead.is_empty() && busy && !window.is_zero() && all_slots > 1 {
            // Under load, wait briefly for every slot so one claim carries as many jobs as it
            // can: short jobs free them all within the window, longer ones give what is free.
            let more = Arc::clone(&slots).acquire_many_owned(all_slots - 1);
            ahead = 0;
            if let Ok(Ok(mut more)) = tokio::time::timeout(window, more).await {
                // Every job of the last claim ended: their pace says how many the slots start
                // within the read-ahead span.
                ahead = pace.since_return(starter.started()).min(claim_ahead);
                while more.num_permits() > 0 {
                    match more.split(1) {
                        Some(one) => permits.push(one),
                        None => break,
                    }
                }
            }
        }
        while let Ok(permit) = Arc::clone(&slots).try_acquire_owned() {
            permits.push(permit);
        }
        // A stop at once frees the slots of executors waiting on a full outcome queue before
        // this task hears of the stop: claim nothing once either is under way.
        if *shared.abandoned.borrow() || *stop.borrow() {
            hand_back(&shared, &mut read_ahead).await;
            return;
        }
        // The jobs claimed ahead start first, in the order they were claimed.
        while let Some(permit) = permits.pop() {
            if let Some(permit) = starter.start_waiting(&mut read_ahead, permit) {
                permits.push(permit);
                break;
            }
        }
        if permits.is_empty() {
            continue;
        }
        let wanted = permits.len();
        // Under a backlog of short jobs, the claim also takes jobs for the next rounds of slots.
        let asked = if busy { wanted + ahead } else { wanted };
        let mut count = ClaimCount {
            free: wanted,
            ahead: asked - wanted,
        };
        // When the first claim returned, and how many jobs had started by then.
        let mut first_returned = None;
        let mut claimed = 0;
        let mut failure = None;
        let mut rate_room_in = None;
        let mut held_back = false;
        // Outcomes written from here on may free room under a running limit.
        outcomes_written.borrow_and_update();
        // From where the last claim ended (where the recent claims began, in turn order), when
        // that is known and the front was looked at recently; then from the front for whatever
        // is still wanted.
        let mut from = position.resume_point();
        loop {
            match plan
                .claim
                .claim(&shared, count, from.as_ref(), &mut round, &mut held)
                .await
            {
                Ok((
                    LimitedClaim {
                        jobs,
                        rate_room_in: room_in,
                        held_back: jobs_held_back,
                        walked_keys,
                    },
                    sent_at,
                )) => {
                    let claimed_at = Instant::now();
                    first_returned.get_or_insert((claimed_at, starter.started()));
                    rate_room_in = room_in;
                    held_back = jobs_held_back;
                    claimed += jobs.len();
                    position.claimed(&plan.claim, &jobs, from.is_none(), claimed_at - sent_at);
                    if walked_keys {
                        position.rewind();
                    }
                    starter.take_in(jobs, sent_at, claimed_at, &mut permits, &mut read_ahead);
                }
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
            // The front is looked at again when the free slots are not filled: a claim that took
            // fewer jobs ahead may have stopped at a job on its last attempt, which a claim with
            // no free slot would not take either.
            if claimed >= wanted || from.is_none() {
                break;
            }
            // The slots still free; the jobs ahead as asked.
            count.free = wanted - claimed;
            from = None;
        }
        drop(permits);
        if let Some(error) = failure {
            busy = false;
            let delay = backoff.next_delay();
            tracing::warn!(queue = plan.name, %error, ?delay, "claiming failed; retrying");
            let stopping = tokio::select! {
                () = tokio::time::sleep(delay) => false,
                _ = stop.wait_for(|stop| *stop) => true,
            };
            if stopping {
                hand_back(&shared, &mut read_ahead).await;
                return;
            }
            continue;
        }
        backoff.reset();
        if let Some((returned_at, started_before)) = first_returned {
            pace = PaceMark::new(returned_at, started_before, starter.started());
        }
        // Out of work when the free slots were not all filled. A claim that took fewer jobs ahead
        // than asked may have stopped at a job on its last attempt: the next one finds out.
        let drained = claimed < wanted;
        busy = !drained;
        if claimed < asked {
            // The jobs ahead ran out, or stopped at a job on its last attempt: the next claims
            // take their free slots' jobs until the slots all free within the window again.
            ahead = 0;
        }
        if !busy {
            // The claims' connection goes back to the pool until claims follow each other again.
            held.drop_connection();
        }
        if let Some(room_in) = rate_room_in {
            // The kind's rate limit lets nothing more start before then, whatever arrives.
            tokio::select! {
                () = tokio::time::sleep(room_in) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        } else if held_back {
            // A limit held due jobs back. Room comes back when a running job of the kind ends:
            // one of this worker's when its outcome is written (its slot is free before that,
            // while the outcome waits for the completer), or another worker's (found at the
            // next poll); or, under a rate limit whose window has room again, at once.
            // Outcomes written since this round's claim began wake it at once. Under a per-key
            // limit, jobs enqueued meanwhile may be ones the limit lets in (another key's): the
            // queues are watched while it waits, as when it runs out of work.
            let _idle = matches!(plan.claim, Claim::KeyLimited { .. }).then(|| Idle::new(&watches));
            tokio::select! {
                _ = outcomes_written.changed() => {}
                () = wake.notified() => {}
                () = tokio::time::sleep(held_retry) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        } else if drained && read_ahead.is_empty() {
            // Out of work: the queues are watched while this producer sleeps, so that enqueue
            // announces new work; the watch, once granted, wakes it to claim again. (Jobs
            // claimed ahead start first, as slots free; the claim after them finds out.)
            let _idle = Idle::new(&watches);
            tokio::select! {
                () = wake.notified() => {}
                () = tokio::time::sleep(shared.config.poll_interval) => {}
                _ = stop.wait_for(|stop| *stop) => return,
            }
        }
    }
}

/// What happened while a claim ahead ran, besides the claim.
struct WhileClaiming {
    /// Slots that freed with no job waiting, kept for the claim's first jobs (or, after a stop or
    /// a hand-back, to start nothing).
    free_slots: Vec<OwnedSemaphorePermit>,
    /// The worker is stopping: the jobs waiting were handed back, and no job started after.
    stopping: bool,
    /// The jobs waiting were handed back, having waited too long for a slot: `(id, lease
    /// token)`. The claim's jobs go back too, behind them.
    handed: Option<Vec<(JobId, Uuid)>>,
}

/// Runs `claim`, a claim ahead, to its end, starting the jobs waiting in `read_ahead` as slots of
/// `slots` free meanwhile; hands them back once one waited [`read_ahead::LONGEST_WAIT`], or at
/// once on a stop (nothing once the worker stops at once: their leases bring them back). Returns
/// the claim's result and what happened meanwhile.
async fn start_while_claiming<T>(
    claim: impl Future<Output = T>,
    shared: &Shared,
    slots: &Arc<Semaphore>,
    stop: &mut watch::Receiver<bool>,
    read_ahead: &mut ReadAhead,
    starter: &mut Starter,
) -> (T, WhileClaiming) {
    let mut meanwhile = WhileClaiming {
        free_slots: Vec::new(),
        stopping: false,
        handed: None,
    };
    tokio::pin!(claim);
    loop {
        let hand_back_at = read_ahead
            .hand_back_at()
            .filter(|_| !*shared.abandoned.borrow());
        let event = tokio::select! {
            biased;
            claimed = &mut claim => return (claimed, meanwhile),
            _ = stop.wait_for(|stop| *stop), if !meanwhile.stopping => DuringClaim::Stop,
            () = tokio::time::sleep_until(hand_back_at.map_or_else(
                tokio::time::Instant::now,
                tokio::time::Instant::from_std,
            )), if hand_back_at.is_some() => DuringClaim::HandBack,
            permit = Arc::clone(slots).acquire_owned(), if !meanwhile.stopping => {
                match permit {
                    Ok(permit) => DuringClaim::Slot(permit),
                    Err(_) => DuringClaim::Stop,
                }
            }
        };
        match event {
            DuringClaim::Stop => {
                meanwhile.stopping = true;
                hand_back(shared, read_ahead).await;
            }
            DuringClaim::HandBack => {
                let runs = hand_back(shared, read_ahead).await;
                meanwhile.handed.get_or_insert_with(Vec::new).extend(runs);
            }
            DuringClaim::Slot(permit) => {
                let idle = if *shared.abandoned.borrow() || meanwhile.handed.is_some() {
                    Some(permit)
                } else {
                    starter.start_waiting(read_ahead, permit)
                };
                meanwhile.free_slots.extend(idle);
            }
        }
    }
}

/// What a producer woke to while its claim ahead ran.
enum DuringClaim {
    /// A slot is free.
    Slot(OwnedSemaphorePermit),
    /// The worker is stopping.
    Stop,
    /// The jobs claimed ahead waited too long for a slot.
    HandBack,
}

/// What a producer waiting for a free slot woke to.
enum Woken {
    /// A slot is free.
    Slot(OwnedSemaphorePermit),
    /// The worker is stopping.
    Stop,
    /// The jobs claimed ahead waited too long for a slot.
    HandBack,
    /// No slot freed within the claim batch window.
    SlotsBusy,
}

/// Hands back the jobs claimed ahead that still wait for a slot: each is ready again with its
/// attempt given back and its place in the claim order kept. The hand-backs are outcomes, and go
/// as every outcome does (see [`completer`]): to the completer's queue, or written at once
/// without one; retried while the leases may still hold, whatever the database refuses written
/// one job at a time. A job whose hand-back cannot be written comes back when its lease expires.
/// On a stop at once nothing is written: their leases bring them back.
///
/// Returns the runs handed to the completer, `(id, lease token)`, to wait for with
/// [`handed_back`].
async fn hand_back(shared: &Shared, read_ahead: &mut ReadAhead) -> Vec<(JobId, Uuid)> {
    if read_ahead.is_empty() || *shared.abandoned.borrow() {
        return Vec::new();
    }
    let mut outcomes = Vec::new();
    for run in read_ahead.take_all() {
        let (id, token) = (run.job.id, run.job.lease_token);
        if shared.running.may_hold(id, token) {
            shared.running.outcome_pending(id, token, false);
            outcomes.push(Outcome::unstarted(id, token));
        } else {
            // Another worker or a rescue may have the job.
            shared.running.remove(id, token);
        }
    }
    if outcomes.is_empty() {
        return Vec::new();
    }
    tracing::debug!(
        handed_back = outcomes.len(),
        "handing back jobs claimed ahead that no slot started"
    );
    let Some(completer) = &shared.completer else {
        completer::write(shared, outcomes).await;
        return Vec::new();
    };
    let mut handed = Vec::with_capacity(outcomes.len());
    for outcome in outcomes {
        let run = (outcome.id, outcome.lease_token);
        if completer.send(outcome).await.is_err() {
            // The completer is gone only on a stop at once.
            break;
        }
        handed.push(run);
    }
    handed
}

/// Waits until the completer has written (or dropped) the hand-backs of `runs`, so that the
/// next claim finds the jobs ready in their places; or until the worker stops.
async fn handed_back(
    shared: &Shared,
    runs: &[(JobId, Uuid)],
    outcomes_written: &mut watch::Receiver<u64>,
    stop: &mut watch::Receiver<bool>,
) {
    let mut abandoned = shared.abandoned.clone();
    loop {
        outcomes_written.borrow_and_update();
        let pending = runs
            .iter()
            .any(|(id, token)| shared.running.state_of(*id, *token) != Renewal::Unknown);
        if !pending {
            return;
        }
        tokio::select! {
            _ = outcomes_written.changed() => {}
            _ = stop.wait_for(|stop| *stop) => return,
            _ = abandoned.wait_for(|abandoned| *abandoned) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kinds_without_a_rate_limit_or_a_kind_wide_limit_claim_ahead() {
        let lease = Duration::from_secs(30);
        let per_key = |max_running, rate_limit, rate_limit_per_key| Claim::KeyLimited {
            kind: "k",
            queue: "default".into(),
            limits: ClaimLimits {
                max_running,
                rate_limit,
                max_running_per_key: Some(2),
                rate_limit_per_key,
            },
            lease,
        };
        let rate: RateLimit = "10/1s".parse().unwrap();
        let queue = Claim::Queue {
            queue: "default".into(),
            kinds: vec!["k"],
            leases: vec![lease],
        };
        let fair = Claim::Fair {
            kind: "k",
            queue: "default".into(),
            lease,
        };
        let limited = Claim::Limited {
            kind: "k",
            queues: vec!["default".into()],
            max_running: Some(2),
            rate_limit: None,
            lease,
        };
        assert_eq!(queue.most_ahead(128), 128);
        assert_eq!(fair.most_ahead(128), 128);
        assert_eq!(per_key(None, None, None).most_ahead(128), 128);
        assert_eq!(per_key(Some(100), None, None).most_ahead(128), 0);
        assert_eq!(per_key(None, Some(rate), None).most_ahead(128), 0);
        assert_eq!(per_key(None, None, Some(rate)).most_ahead(128), 0);
        assert_eq!(limited.most_ahead(128), 0);
    }

    #[test]
    fn the_front_is_looked_at_every_second_while_looks_are_cheap() {
        assert_eq!(
            front_claim_interval(Duration::from_millis(2)),
            FRONT_CLAIM_EVERY
        );
        assert_eq!(
            front_claim_interval(Duration::from_millis(50)),
            FRONT_CLAIM_EVERY
        );
    }

    #[test]
    fn a_slow_look_at_the_front_spaces_the_next_ones_out() {
        // 200 ms: the next look 4 s after it ended, so that looks take a twenty-first of the
        // time.
        assert_eq!(
            front_claim_interval(Duration::from_millis(200)),
            Duration::from_secs(4)
        );
        // However slow, the front is looked at within 10 s.
        assert_eq!(
            front_claim_interval(Duration::from_secs(5)),
            FRONT_CLAIM_LONGEST_INTERVAL
        );
    }

    #[test]
    fn only_looks_at_the_front_are_timed_and_a_rewind_looks_at_once() {
        let place = ClaimPlace {
            priority: 0,
            run_at: chrono::Utc::now(),
            id: 7,
        };
        let queue = Claim::Queue {
            queue: "default".into(),
            kinds: vec!["k"],
            leases: vec![Duration::from_secs(30)],
        };
        let place = Place::Queue(place);
        let mut position = ClaimPosition::new(&queue);
        position.last = Some(place.clone());
        // A slow look at the front: the next claims resume from the place.
        let looked_at = Instant::now();
        position.claimed(&queue, &[], true, Duration::from_secs(5));
        assert_eq!(position.resume_point(), Some(place.clone()));
        let due_at = position.front_due_at;
        assert!(due_at >= looked_at + FRONT_CLAIM_LONGEST_INTERVAL);
        // A resumed claim, however slow, does not change when the front is due.
        position.claimed(&queue, &[], false, Duration::from_secs(60));
        assert_eq!(position.front_due_at, due_at);
        assert_eq!(position.resume_point(), Some(place));
        // Jobs handed back are in their places, before the place: the next claim starts at the
        // front however slow the last look was.
        position.rewind();
        assert_eq!(position.resume_point(), None);
    }

    /// A claim in turn order reads again from where the last one began; from the start of that
    /// turn when it began a turn, where a job committed meanwhile may have taken the turn with a
    /// key before the first it took.
    #[test]
    fn claims_in_turn_order_read_again_from_the_start_of_a_turn_the_last_one_began() {
        let place = |turn: i64, key: &str, id: JobId| {
            Place::Fair(FairPlace {
                priority: 0,
                turn,
                key: key.into(),
                id,
            })
        };
        let mid_turn = place(7, "tenant m", 70);
        let before_in_its_turn = place(7, "tenant c", 30);
        assert_eq!(
            mid_turn.clone().rescan_from(Some(&before_in_its_turn)),
            mid_turn
        );
        let start_of_turn = place(7, "", 0);
        for before in [Some(place(6, "tenant z", 60)), None] {
            assert_eq!(mid_turn.clone().rescan_from(before.as_ref()), start_of_turn);
        }
        let queue = Place::Queue(ClaimPlace {
            priority: 0,
            run_at: chrono::DateTime::<chrono::Utc>::UNIX_EPOCH,
            id: 1,
        });
        assert_eq!(queue.clone().rescan_from(None), queue);
    }

    /// Claims in turn order read again from where the oldest claim of the last
    /// [`RESCAN_WINDOW`] began, and from the last one's place at least.
    #[test]
    fn claims_in_turn_order_read_again_the_range_of_the_recent_claims() {
        let fair = Claim::Fair {
            kind: "k",
            queue: "default".into(),
            lease: Duration::from_secs(30),
        };
        let place = |turn: i64| {
            Place::Fair(FairPlace {
                priority: 0,
                turn,
                key: "tenant".into(),
                id: turn,
            })
        };
        let mut position = ClaimPosition::new(&fair);
        position.last = Some(place(9));
        let now = Instant::now();
        let Some(long_ago) = now.checked_sub(RESCAN_WINDOW * 2) else {
            return;
        };
        position.claim_began(place(1), long_ago);
        assert_eq!(position.resume_point(), Some(place(1)), "the last claim's");
        position.claim_began(place(3), now - RESCAN_WINDOW / 2);
        position.claim_began(place(5), now);
        assert_eq!(
            position.resume_point(),
            Some(place(3)),
            "the oldest within the window"
        );
        // At most the last few claims.
        for turn in 6..6 + RESCAN_CLAIMS as i64 {
            position.claim_began(place(turn), now);
        }
        assert_eq!(position.resume_point(), Some(place(6)));
        // A claim of another priority: its place alone.
        let higher = Place::Fair(FairPlace {
            priority: 5,
            turn: 2,
            key: "tenant".into(),
            id: 100,
        });
        position.claim_began(higher.clone(), now);
        assert_eq!(position.resume_point(), Some(higher));
        position.rewind();
        assert_eq!(position.resume_point(), None);
    }
}
