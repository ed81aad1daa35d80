//! Flow steering: flows, flow actions and flow counters.

use super::*;

/// `ibv_create_flow`—Attaches a flow steering rule to a QP.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
/// See `ibv_create_flow(3)`.
///
/// # Safety
/// `qp` must be a valid QP and `flow` a valid `ibv_flow_attr` followed in
/// memory by its `num_of_specs` flow specs (`flow->size` bytes in all).
#[inline]
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, flow: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*qp).context, ibv_create_flow(qp, flow)) }
}

/// `ibv_destroy_flow`—Detaches and frees a flow steering rule.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `flow_id` must be a valid flow from [`ibv_create_flow`], not used
/// afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_flow(flow_id: *mut ibv_flow) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*flow_id).context, ibv_destroy_flow(flow_id)) }
}

/// `ibv_create_flow_action_esp`—Creates an IPsec ESP flow action.
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `ctx` must be a valid context and `esp` valid for reads (with every
/// pointer inside it valid).
#[inline]
pub unsafe fn ibv_create_flow_action_esp(
    ctx: *mut ibv_context,
    esp: *mut ibv_flow_action_esp_attr,
) -> *mut ibv_flow_action {
    // SAFETY: caller contract.
    unsafe { ctx_op!(ctx, create_flow_action_esp(ctx, esp)) }
}

/// `ibv_modify_flow_action_esp`—Modifies an IPsec ESP flow action.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `action` must be a valid flow action and `esp` valid for reads.
#[inline]
pub unsafe fn ibv_modify_flow_action_esp(
    action: *mut ibv_flow_action,
    esp: *mut ibv_flow_action_esp_attr,
) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*action).context, modify_flow_action_esp(action, esp)) }
}

/// `ibv_destroy_flow_action`—Destroys a flow action.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `action` must be a valid flow action, not used afterwards on success.
#[inline]
pub unsafe fn ibv_destroy_flow_action(action: *mut ibv_flow_action) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*action).context, destroy_flow_action(action)) }
}

/// `ibv_create_counters`—Creates a counters object (to be attached to a flow
/// and read with [`ibv_read_counters`]).
///
/// Sets errno to `EOPNOTSUPP` and returns null when the provider lacks it.
///
/// # Safety
/// `context` must be a valid context and `init_attr` valid for reads.
#[inline]
pub unsafe fn ibv_create_counters(
    context: *mut ibv_context,
    init_attr: *mut ibv_counters_init_attr,
) -> *mut ibv_counters {
    // SAFETY: caller contract.
    unsafe { ctx_op!(context, create_counters(context, init_attr)) }
}

/// `ibv_destroy_counters`—Destroys a counters object.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object, not used afterwards on
/// success.
#[inline]
pub unsafe fn ibv_destroy_counters(counters: *mut ibv_counters) -> c_int {
    // SAFETY: caller contract.
    unsafe { ctx_op!((*counters).context, destroy_counters(counters)) }
}

/// `ibv_attach_counters_point_flow`—Attaches a counter description of a
/// counters object to a flow (or, with a null `flow`, to the next flow
/// created with the counters object as an action).
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object, `attr` valid for reads and
/// `flow` null or a valid flow.
#[inline]
pub unsafe fn ibv_attach_counters_point_flow(
    counters: *mut ibv_counters,
    attr: *mut ibv_counter_attach_attr,
    flow: *mut ibv_flow,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        ctx_op!(
            (*counters).context,
            attach_counters_point_flow(counters, attr, flow)
        )
    }
}

/// `ibv_read_counters`—Reads up to `ncounters` values of a counters object
/// into `counters_value`.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider lacks it).
///
/// # Safety
/// `counters` must be a valid counters object and `counters_value` valid for
/// writes of `ncounters` values.
#[inline]
pub unsafe fn ibv_read_counters(
    counters: *mut ibv_counters,
    counters_value: *mut u64,
    ncounters: u32,
    flags: u32,
) -> c_int {
    // SAFETY: caller contract.
    unsafe {
        ctx_op!(
            (*counters).context,
            read_counters(counters, counters_value, ncounters, flags)
        )
    }
}
