//! The checker judged on small histories whose verdict is known: answers produced by a
//! reference ledger (whose fencing tokens are offset by another effect, as in a real
//! cluster), then reordered, made concurrent, left pending, or forged.

use ledger_core::{
    Caller, ClaimOutcome, Command, CommandBody, EffectKey, Ledger, Outcome, Report, Stamp,
};

use super::model::configured_ledger;
use super::oplog::{Answer, Call, Op};
use super::search::{Search, Verdict};
use super::ClockSlack;
use crate::fixtures::{declaration, effect_key, ToolKind};

const EFFECT: &str = "lin";

fn key() -> EffectKey {
    effect_key(EFFECT)
}

fn claim(holder: &str) -> CommandBody {
    CommandBody::Claim {
        declaration: declaration(EFFECT, ToolKind::Unkeyed),
        holder: holder.into(),
        lease_ms: None,
        confirmation: None,
    }
}

fn report_committed(token: u64) -> CommandBody {
    CommandBody::Report {
        key: key(),
        fencing_token: token,
        report: Report::Committed {
            receipt: "r-1".into(),
        },
    }
}

/// A claim of the effect through the keyed tool, asking for `lease_ms` if any.
fn keyed_claim(holder: &str, lease_ms: Option<u64>) -> CommandBody {
    CommandBody::Claim {
        declaration: declaration(EFFECT, ToolKind::Keyed),
        holder: holder.into(),
        lease_ms,
        confirmation: None,
    }
}

/// A report that the send under `token` went out and its answer was lost.
fn report_unknown(token: u64) -> CommandBody {
    CommandBody::Report {
        key: key(),
        fencing_token: token,
        report: Report::Unknown {
            reason: "sent; the answer was lost".into(),
        },
    }
}

/// A reference ledger whose first fencing token went to another effect.
fn reference() -> Ledger {
    let mut ledger = configured_ledger();
    let other = CommandBody::Claim {
        declaration: declaration("other", ToolKind::Keyed),
        holder: "elsewhere".into(),
        lease_ms: None,
        confirmation: None,
    };
    apply(&mut ledger, "other", &other, 100);
    ledger
}

/// `body` as the tenant's command `id`.
fn command(id: &str, body: &CommandBody) -> Command {
    Command {
        command_id: id.into(),
        caller: Caller::Tenant(crate::fixtures::TENANT.into()),
        body: body.clone(),
    }
}

fn apply(ledger: &mut Ledger, id: &str, body: &CommandBody, at: u64) -> Outcome {
    ledger.apply(&command(id, body), at)
}

fn op(id: &str, body: CommandBody, span: (u64, Option<u64>), outcome: Outcome) -> Op {
    Op {
        client: id.into(),
        key: key(),
        call: Call::Command {
            command_id: id.into(),
            body: Box::new(body),
        },
        invoked_ms: span.0,
        answer: span.1.map(|at| (at, Answer::Outcome(outcome))),
    }
}

fn read(span: (u64, u64), ledger: &Ledger) -> Op {
    Op {
        client: "reader".into(),
        key: key(),
        call: Call::Read,
        invoked_ms: span.0,
        answer: Some((span.1, Answer::Record(ledger.get(&key()).map(Box::new)))),
    }
}

fn verdict(ops: &[Op]) -> Verdict {
    Search::new(ops.iter().collect(), 100_000).run(&configured_ledger())
}

/// The verdict when the run's wall clocks may lead real time by `real_max_lead_ms`.
fn verdict_with_clock_lead(ops: &[Op], real_max_lead_ms: u64) -> Verdict {
    Search::new(ops.iter().collect(), 100_000)
        .with_clock_slack(ClockSlack {
            lag_ms: 0,
            lead_ms: 0,
            real_max_lead_ms,
        })
        .run(&configured_ledger())
}

fn token(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Claim(ClaimOutcome::Proceed(g)) => g.fencing_token,
        other => panic!("not a grant: {other:?}"),
    }
}

#[test]
fn sequential_history_with_global_tokens_is_linearizable() {
    let mut real = reference();
    let granted = apply(&mut real, "c1", &claim("h1"), 1_000);
    let t = token(&granted);
    assert_eq!(t, 2, "the reference ledger offsets tokens");
    let reported = apply(&mut real, "c2", &report_committed(t), 1_100);
    let replayed = apply(&mut real, "c3", &claim("h2"), 1_200);
    let ops = vec![
        op("c1", claim("h1"), (990, Some(1_010)), granted),
        op("c2", report_committed(t), (1_090, Some(1_110)), reported),
        op("c3", claim("h2"), (1_190, Some(1_210)), replayed),
        read((1_300, 1_310), &real),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

#[test]
fn grant_after_an_acknowledged_commit_is_not_linearizable() {
    let mut real = reference();
    let granted = apply(&mut real, "c1", &claim("h1"), 1_000);
    let t = token(&granted);
    let reported = apply(&mut real, "c2", &report_committed(t), 1_100);
    // What a ledger that lost the commit would answer to a later claim.
    let mut forgetful = reference();
    apply(&mut forgetful, "c1", &claim("h1"), 1_000);
    let forged = apply(&mut forgetful, "c3", &claim("h2"), 20_000);
    assert!(matches!(forged, Outcome::Claim(ClaimOutcome::Reconcile(_))));
    let ops = vec![
        op("c1", claim("h1"), (990, Some(1_010)), granted),
        op("c2", report_committed(t), (1_090, Some(1_110)), reported),
        op("c3", claim("h2"), (19_990, Some(20_010)), forged),
    ];
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

#[test]
fn one_attempt_granted_to_two_holders_is_not_linearizable() {
    let mut first = reference();
    let mut second = reference();
    let to_h1 = apply(&mut first, "c1", &claim("h1"), 1_000);
    let to_h2 = apply(&mut second, "c2", &claim("h2"), 1_020);
    let ops = vec![
        op("c1", claim("h1"), (990, Some(1_010)), to_h1),
        op("c2", claim("h2"), (1_015, Some(1_030)), to_h2),
    ];
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

#[test]
fn overlapping_calls_take_effect_in_the_order_their_answers_need() {
    let mut real = reference();
    let to_h2 = apply(&mut real, "c2", &claim("h2"), 1_020);
    let in_flight = apply(&mut real, "c1", &claim("h1"), 1_040);
    assert!(matches!(
        in_flight,
        Outcome::Claim(ClaimOutcome::InFlight { .. })
    ));
    let ops = vec![
        op("c1", claim("h1"), (1_000, Some(1_100)), in_flight),
        op("c2", claim("h2"), (1_010, Some(1_050)), to_h2),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

#[test]
fn claim_spanning_the_end_of_a_lease_may_find_it_expired() {
    let mut real = reference();
    let granted = apply(&mut real, "c1", &claim("h1"), 1_000);
    let lease_end = match &granted {
        Outcome::Claim(ClaimOutcome::Proceed(g)) => g.lease_until_ms,
        other => panic!("{other:?}"),
    };
    let expired = apply(&mut real, "c2", &claim("h2"), lease_end + 5);
    assert!(matches!(
        expired,
        Outcome::Claim(ClaimOutcome::Reconcile(_))
    ));
    let ops = vec![
        op("c1", claim("h1"), (990, Some(1_010)), granted.clone()),
        op(
            "c2",
            claim("h2"),
            (lease_end - 20, Some(lease_end + 20)),
            expired.clone(),
        ),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    // The same answer to a claim that ended before the lease did is impossible.
    let early = vec![
        op("c1", claim("h1"), (990, Some(1_010)), granted),
        op(
            "c2",
            claim("h2"),
            (lease_end - 40, Some(lease_end - 20)),
            expired,
        ),
    ];
    assert_eq!(verdict(&early), Verdict::NotLinearizable);
}

#[test]
fn pending_claim_that_took_effect_explains_what_others_saw() {
    let mut real = reference();
    apply(&mut real, "c1", &claim("h1"), 1_500);
    let in_flight = apply(&mut real, "c2", &claim("h2"), 2_000);
    let ops = vec![
        op("c1", claim("h1"), (1_000, None), Outcome::Configured),
        op("c2", claim("h2"), (1_990, Some(2_010)), in_flight.clone()),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
    let unexplained = vec![op("c2", claim("h2"), (1_990, Some(2_010)), in_flight)];
    assert_eq!(verdict(&unexplained), Verdict::NotLinearizable);
}

#[test]
fn stale_read_is_not_linearizable() {
    let mut real = reference();
    let granted = apply(&mut real, "c1", &claim("h1"), 1_000);
    let before_commit = real.clone();
    let t = token(&granted);
    let reported = apply(&mut real, "c2", &report_committed(t), 1_100);
    let ops = vec![
        op("c1", claim("h1"), (990, Some(1_010)), granted),
        op("c2", report_committed(t), (1_090, Some(1_110)), reported),
        read((1_200, 1_210), &before_commit),
    ];
    assert_eq!(verdict(&ops), Verdict::NotLinearizable);
}

/// Found by `vopr` seed 51: the leader stamps a command when it proposes it, so a read
/// that began after the stamp may still not see the command; the checker once required
/// every command after a read to be stamped after the read began.
#[test]
fn command_stamped_before_a_read_began_may_apply_after_it() {
    let before = reference();
    let mut real = reference();
    let granted = apply(&mut real, "c1", &claim("h1"), 1_200);
    let ops = vec![
        op("c1", claim("h1"), (1_000, Some(3_000)), granted),
        read((1_300, 1_600), &before),
    ];
    assert_eq!(verdict(&ops), Verdict::Linearizable);
}

/// A leader that knew real time to be ahead of ledger time (ledger time lags after an
/// outage no node measured) starts a dispatch grant's horizon at the earliest real time
/// it may be: the model takes that time from the grant's horizon deadline. No leader can
/// stamp a real time later than the answer, so a grant claiming one is not explained.
#[test]
fn a_grant_whose_horizon_starts_at_a_later_real_time_is_explained() {
    let mut reference = reference();
    let command = Command {
        command_id: "c1".into(),
        caller: Caller::Tenant(crate::fixtures::TENANT.into()),
        body: claim("h1"),
    };
    let stamp = Stamp {
        ledger_ms: 1_000,
        real_ms_min: 2_500,
        real_ms_max: 2_500,
    };
    let granted = reference.apply_stamped(&command, stamp);
    token(&granted);
    let lagging = ClockSlack {
        lag_ms: 2_000,
        lead_ms: 0,
        real_max_lead_ms: 0,
    };
    let judge = |ops: Vec<Op>| {
        Search::new(ops.iter().collect(), 100_000)
            .with_clock_slack(lagging)
            .run(&configured_ledger())
    };
    let in_time = op("c1", claim("h1"), (2_400, Some(2_600)), granted.clone());
    assert_eq!(judge(vec![in_time]), Verdict::Linearizable);
    let answered_before = op("c1", claim("h1"), (2_400, Some(2_450)), granted);
    assert_eq!(judge(vec![answered_before]), Verdict::NotLinearizable);
}

/// A leader's upper bound on real time is never below its own wall clock plus the skew,
/// and a wall clock may be days ahead: a keyed re-send may then be told `horizon_passed`
/// seconds after its dispatch. The checker explains that only as far as the run's clocks
/// may lead.
#[test]
fn a_horizon_judged_passed_early_is_explained_only_by_a_clock_the_run_allows() {
    let mut reference = reference();
    let granted = apply(&mut reference, "c1", &keyed_claim("h1", None), 1_000);
    let unknown = report_unknown(token(&granted));
    let reported = apply(&mut reference, "r1", &unknown, 1_100);
    let horizon_ms = reference
        .get(&key())
        .map(|r| r.policy.provider_horizon_ms)
        .expect("claimed");
    let ahead = Stamp {
        ledger_ms: 1_200,
        real_ms_min: 1_200,
        real_ms_max: 1_200 + 2 * horizon_ms,
    };
    let passed = reference.apply_stamped(&command("c2", &keyed_claim("h2", None)), ahead);
    assert!(
        matches!(passed, Outcome::Claim(ClaimOutcome::HorizonPassed(_))),
        "{passed:?}"
    );
    let ops = [
        op("c1", keyed_claim("h1", None), (990, Some(1_010)), granted),
        op("r1", unknown, (1_090, Some(1_110)), reported),
        op("c2", keyed_claim("h2", None), (1_190, Some(1_210)), passed),
    ];
    assert_eq!(verdict_with_clock_lead(&ops, 0), Verdict::NotLinearizable);
    assert_eq!(
        verdict_with_clock_lead(&ops, 3 * horizon_ms),
        Verdict::Linearizable
    );
}

/// A keyed re-send that asked for a longer lease than its policy's has it cut to end
/// where real time may reach the re-send deadline (`Stamp::ledger_ms_before`), which
/// shows the exact upper bound its leader stamped. The checker tries that bound: neither
/// the stamp's own nor the furthest a clock allows gives the same lease end.
#[test]
fn a_resend_lease_cut_at_its_deadline_is_explained_by_the_bound_it_shows() {
    let mut reference = reference();
    let granted = apply(&mut reference, "c1", &keyed_claim("h1", None), 1_000);
    let unknown = report_unknown(token(&granted));
    let reported = apply(&mut reference, "r1", &unknown, 1_100);
    let record = reference.get(&key()).expect("claimed");
    let deadline_ms = record.resend_deadline_ms().expect("a keyed record has one");
    let (lease_ms, lease_ms_max) = (record.policy.lease_ms, record.policy.lease_ms_max);
    // Real time may be so late that only half the longest lease fits before the deadline.
    let stamped = Stamp {
        ledger_ms: 1_200,
        real_ms_min: 1_200,
        real_ms_max: deadline_ms - lease_ms_max / 2,
    };
    let long = keyed_claim("h2", Some(lease_ms_max));
    let resent = reference.apply_stamped(&command("c2", &long), stamped);
    let lease_until_ms = match &resent {
        Outcome::Claim(ClaimOutcome::Proceed(grant)) => grant.lease_until_ms,
        other => panic!("not a re-send: {other:?}"),
    };
    assert!(lease_ms < lease_ms_max / 2, "the policy's own lease fits");
    assert_eq!(
        lease_until_ms,
        1_200 + lease_ms_max / 2,
        "the lease ends where real time may reach the deadline"
    );
    let ops = [
        op("c1", keyed_claim("h1", None), (990, Some(1_010)), granted),
        op("r1", unknown, (1_090, Some(1_110)), reported),
        op("c2", long, (1_190, Some(1_210)), resent),
    ];
    let shown_lead_ms = stamped.real_ms_max - 1_210;
    assert_eq!(
        verdict_with_clock_lead(&ops, shown_lead_ms),
        Verdict::Linearizable
    );
    assert_eq!(
        verdict_with_clock_lead(&ops, 10 * shown_lead_ms),
        Verdict::Linearizable
    );
    assert_eq!(
        verdict_with_clock_lead(&ops, shown_lead_ms - 1),
        Verdict::NotLinearizable,
        "the bound shown lies beyond what the run's clocks allow"
    );
}

/// An operator's decision on the escalation `escalation_token` names.
fn decide_not_committed(escalation_token: u64) -> CommandBody {
    CommandBody::DecideEscalation {
        key: key(),
        escalation_token,
        decision: ledger_core::Decision::NotCommitted,
        operator: "ops:simulated".into(),
        note: "nothing at the provider".into(),
    }
}

/// A decision in the op log is the operator's command (the model applies it as such), its
/// escalation token translated like a fencing token: a history in which a spent dispatch
/// budget escalates the effect, a person decides it not committed and it is granted again
/// is linearizable; the same history with the decision answered "not escalated", or a
/// grant before the decision, is not.
#[test]
fn an_operators_decision_is_applied_as_the_operators_command() {
    let mut ledger = reference();
    let mut ops = Vec::new();
    let mut at = 1_000;
    let budget = ToolKind::Unkeyed.policy().dispatch_attempts_max;
    for i in 0..budget {
        let (c, r) = (format!("c{i}"), format!("r{i}"));
        let granted = apply(&mut ledger, &c, &claim("h1"), at);
        let Outcome::Claim(ClaimOutcome::Proceed(grant)) = &granted else {
            panic!("claim {i}: {granted:?}");
        };
        let failed = CommandBody::Report {
            key: key(),
            fencing_token: grant.fencing_token,
            report: Report::FailedBeforeEffect {
                proof: "HTTP 400 before processing".into(),
            },
        };
        let reported = apply(&mut ledger, &r, &failed, at + 10);
        ops.push(op(&c, claim("h1"), (at - 5, Some(at + 5)), granted));
        ops.push(op(&r, failed, (at + 5, Some(at + 15)), reported));
        at += 100;
    }
    let escalated = apply(&mut ledger, "c-last", &claim("h1"), at);
    assert!(
        matches!(escalated, Outcome::Claim(ClaimOutcome::Escalated { .. })),
        "{escalated:?}"
    );
    ops.push(op("c-last", claim("h1"), (at - 5, Some(at + 5)), escalated));
    // The reference's tokens are offset by another effect's: the model translates the
    // escalation token through the attempt it names, as it does fencing tokens.
    let token = ledger.get(&key()).unwrap().escalation_token().unwrap();
    let decide = decide_not_committed(token);
    let operator = Command {
        command_id: "d1".into(),
        caller: Caller::Operator,
        body: decide.clone(),
    };
    let decided = ledger.apply(&operator, at + 100);
    assert!(matches!(decided, Outcome::Decided { .. }), "{decided:?}");
    let regranted = apply(&mut ledger, "c-again", &claim("h1"), at + 200);
    assert!(
        matches!(regranted, Outcome::Claim(ClaimOutcome::Proceed(_))),
        "{regranted:?}"
    );
    let decision = op("d1", decide.clone(), (at + 95, Some(at + 105)), decided);
    let grant = op(
        "c-again",
        claim("h1"),
        (at + 195, Some(at + 205)),
        regranted,
    );

    // The escalating history, then the given ops.
    let then = |tail: Vec<Op>| -> Vec<Op> { ops.iter().cloned().chain(tail).collect() };
    let history = then(vec![decision, grant.clone()]);
    assert_eq!(verdict(&history), Verdict::Linearizable);

    let refused = op(
        "d1",
        decide,
        (at + 95, Some(at + 105)),
        Outcome::Refused(ledger_core::Refusal::NotEscalated),
    );
    let forged = then(vec![refused, grant.clone()]);
    assert_eq!(verdict(&forged), Verdict::NotLinearizable);

    let undecided = then(vec![grant]);
    assert_eq!(verdict(&undecided), Verdict::NotLinearizable);
}
