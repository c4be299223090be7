//! The store's conformance suite (docs/devstack.md, "The store"): one list
//! of cases, each the contract of one store operation or group of them as
//! the dev stack relies on it (rows read back as written, updates change
//! what they say and only when they say, lists come in their order, an
//! unknown id reads `None`), and one list of races (two writers of one row
//! at once, exactly one winner). Both lists run on both backends, every
//! item on a fresh store (`backends`): SQLite in memory, and PostgreSQL in
//! a throwaway cluster, skipped where PostgreSQL is not installed, except
//! under CI.
//!
//! The cases are grouped by table group: `membership` (pools, tokens,
//! join requests, nodes, sessions, certificates, bindings), `work`
//! (commands, events, specs, inventory, section statuses, reservations),
//! `vps` (instances, volumes, labels, secrets), `stack` (releases, OTLP
//! exports, fleet counts, gateways, the clock, settings, ticket keys, the
//! seam), and
//! `facts` (what the fleet invariants read), and `races`.

mod backends;
mod facts;
mod membership;
mod races;
mod seed;
mod stack;
mod vps;
mod work;

use devstack_store::Store;

/// A case: its name and its test of a fresh store.
pub type Case = (&'static str, fn(&Store));

/// A race: its name and its test of two handles on one fresh store.
pub type Race = (&'static str, fn(&Store, &Store));

/// Every case, run on each backend.
const CASES: &[Case] = &[
    ("pools read back by id and name, oldest first", membership::pools_read_back_by_id_and_name_oldest_first),
    ("a pool name is taken once", membership::a_pool_name_is_taken_once),
    ("tokens read back by hash and pool", membership::tokens_read_back_by_hash_and_pool),
    ("a token is spent one use at a time", membership::a_token_is_spent_one_use_at_a_time_until_none_is_left),
    ("an expired token is not spent", membership::an_expired_token_is_not_spent),
    ("a join request is answered the same again", membership::a_join_request_is_answered_the_same_again),
    ("nodes read back in join order", membership::nodes_read_back_in_join_order),
    ("a node is accepted, then adopted once", membership::a_node_is_accepted_then_adopted_once),
    ("a rejected node is never adopted", membership::a_rejected_node_is_never_adopted),
    ("a hello and an applied generation", membership::a_hello_and_an_applied_generation_are_recorded),
    ("each session epoch is taken once", membership::each_session_epoch_is_taken_once_and_moves_the_home),
    ("only the current epoch passes the fence", membership::only_the_current_epoch_passes_the_fence),
    ("the unreachable mark", membership::the_unreachable_mark_is_set_and_cleared_by_the_store_s_clock),
    ("a session takes the next epoch", membership::a_session_takes_the_next_epoch_and_its_gateway),
    ("sessions close once and by gateway", membership::sessions_close_once_and_by_gateway),
    ("closed sessions beyond those kept", membership::a_session_forgets_closed_sessions_beyond_those_kept),
    ("certificates and the valid one by pin", membership::certificates_read_back_and_the_valid_one_is_found_by_pin),
    ("revoking a node's certificates", membership::revoking_a_node_revokes_each_certificate_once),
    ("renewals are certificates no join issued", membership::renewals_are_the_certificates_no_join_issued),
    ("an EK stays bound to its first node", membership::an_ek_stays_bound_to_its_first_node),
    ("a command reads back as enqueued", work::a_command_reads_back_as_enqueued),
    ("a command for an unknown node is refused", work::a_command_for_an_unknown_node_is_refused),
    ("pending and open commands", work::pending_and_open_commands_are_listed_by_state),
    ("each delivery is counted", work::each_delivery_is_counted_and_the_first_moves_pending_to_delivered),
    ("a terminal command state stays", work::a_terminal_command_state_is_not_changed_again),
    ("a command's history in order", work::a_command_s_history_is_kept_in_order),
    ("an event recorded twice is recorded once", work::an_event_recorded_twice_is_recorded_once),
    ("a node keeps its newest journals", work::a_node_keeps_only_its_newest_journals),
    ("a seq out of range", work::a_seq_above_the_store_s_range_is_the_caller_s_error),
    ("a spec becomes the node's generation", work::a_spec_becomes_the_node_s_generation),
    ("an inventory section is replaced", work::an_inventory_section_is_replaced_by_the_next_report),
    ("a section status is replaced", work::a_section_status_is_replaced_by_the_next_report),
    ("a reservation reads back as booked", work::a_reservation_reads_back_as_booked),
    ("a reservation's life", work::a_reservation_moves_pending_active_releasing_released),
    ("only a reservation not over fails", work::only_a_reservation_that_is_not_over_fails),
    ("a liveness mark and its heard time", facts::a_mark_is_kept_with_its_heard_time_and_cleared_once),
    ("a spec delivered, then observed", facts::a_spec_delivered_is_observed_when_the_node_applies_it),
    ("a release's cause", facts::a_release_keeps_its_cause_and_a_failure_after_it_does_not_change_it),
    ("usage windows", facts::usage_windows_add_up_to_the_booked_time_and_a_replay_adds_none),
    ("instances by host and schedulability", vps::instances_read_back_and_are_listed_by_host_and_schedulability),
    ("an instance placed, reported, deleted", vps::an_instance_is_placed_reported_and_deleted_once),
    ("an instance's desired state and memory", vps::an_instance_s_desired_state_spec_and_memory_are_recorded),
    ("a volume's life", vps::a_volume_is_made_grown_reported_and_deleted_once),
    ("driver labels", vps::a_node_s_driver_labels_are_replaced_only_when_they_change),
    ("a secret", vps::a_secret_reads_back_and_is_stored_once),
    ("a release and its artifacts", stack::a_release_reads_back_with_its_artifacts),
    ("otlp exports within bounds", stack::otlp_exports_keep_the_newest_per_node_and_in_bytes),
    ("the fleet's counts", stack::the_fleet_is_counted_by_state),
    ("gateways register and beat", stack::gateways_register_beat_and_are_listed_by_id),
    ("a gateway drains and registers again", stack::a_gateway_drains_counts_fenced_writes_and_registers_again),
    ("the store's clock", stack::the_store_s_clock_is_now_and_runs_forward),
    ("a setting", stack::a_setting_reads_back_and_is_replaced),
    ("a ticket key per period", stack::a_ticket_key_is_made_once_per_period_and_forgotten),
    ("a failed write leaves nothing", stack::a_failed_write_leaves_nothing),
    ("a write's value and rows", stack::a_write_s_value_comes_back_and_its_rows_are_read),
    ("a one-statement read", stack::a_one_statement_read_reads_and_refuses_a_second_statement_or_a_write),
    ("the liveness lane's own connection", stack::the_liveness_lane_does_not_wait_for_the_shared_connections),
];

/// Every race, run on each backend.
const RACES: &[Race] = &[
    ("a token's last use", races::a_token_s_last_use_goes_to_one_of_two_joins),
    ("two sessions of one node", races::two_sessions_of_one_node_take_two_epochs_and_the_later_owns_it),
    ("two gateways deliver one command", races::two_gateways_deliver_one_command_once),
    ("an event sent twice at once", races::an_event_sent_twice_at_once_is_recorded_once),
    ("a node adopted by two at once", races::a_node_is_adopted_once_of_two_at_once),
    ("a command's outcome set by two at once", races::a_command_s_outcome_is_set_once_of_two_at_once),
    ("two gateways meter one booking", races::two_gateways_meter_one_booking_and_each_window_is_kept_once),
    ("two gateways make one ticket key", races::two_gateways_make_one_ticket_key_per_period),
];

#[test]
fn the_store_conforms_on_sqlite() {
    backends::run_on_sqlite(CASES, RACES);
}

#[test]
fn the_store_conforms_on_postgres() {
    backends::run_on_postgres(CASES, RACES);
}
