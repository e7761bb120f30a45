//! The kubelet's eviction message (pkg/kubelet/eviction/helpers.go
//! `evictionMessage`), built in one place: the manager's victims (pod level)
//! and the `api` evictor's Eviction and Event (container level) both use it.

use super::local_storage::canonical_bytes;
use super::threshold::{Signal, SignalResource, ThresholdValue};

/// The resource a signal starves, as the kubelet names it in its messages.
pub fn resource_name(s: Signal) -> &'static str {
    match s.resource() {
        SignalResource::Memory | SignalResource::MemoryStall => "memory",
        SignalResource::Disk => "ephemeral-storage",
        SignalResource::Inodes => "inodes",
        SignalResource::Pids => "pids",
    }
}

/// An observed amount of `signal`'s resource as the kubelet prints it: bytes
/// as a BinarySI quantity (`canonical_bytes`, e.g. `80Mi`, `1536Ki`),
/// inodes and pids as plain numbers.
pub fn amount_text(signal: Signal, v: i64) -> String {
    if signal.is_bytes() {
        canonical_bytes(i128::from(v)).to_string()
    } else {
        v.to_string()
    }
}

/// A threshold's quantity as the kubelet prints it. Deliberately not
/// `canonical_bytes` alone: the kubelet prints a threshold given as a
/// quantity in the format it was written in (`500M` stays `500M`), and qosd
/// keeps only its value — so a multiple of 1024 prints BinarySI, anything
/// else with the largest decimal suffix that divides it exactly (what the
/// user most likely wrote), else as the plain number. A percentage's
/// threshold is computed by the kubelet as a BinarySI quantity.
pub fn threshold_text(signal: Signal, value: &ThresholdValue, resolved: i64) -> String {
    let ThresholdValue::Quantity(n) = *value else {
        return amount_text(signal, resolved);
    };
    if !signal.is_bytes() || n == 0 || n % 1024 == 0 {
        return amount_text(signal, n);
    }
    for (suffix, unit) in [
        ("E", 1_000_000_000_000_000_000i64),
        ("P", 1_000_000_000_000_000),
        ("T", 1_000_000_000_000),
        ("G", 1_000_000_000),
        ("M", 1_000_000),
        ("k", 1_000),
    ] {
        if n % unit == 0 {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

/// A pod or container using more than it requested, for the message.
pub struct OverRequest<'a> {
    /// `Pod` or `Container`.
    pub kind: &'static str,
    /// The pod's or the container's name.
    pub name: &'a str,
    /// Formatted (see [`amount_text`]).
    pub usage: String,
    /// Formatted, or as the spec writes it.
    pub request: String,
}

/// The one builder of the kubelet's eviction message text: "The node was low
/// on resource: R. Threshold quantity: Q, available: A. " then one sentence
/// per pod or container over its request.
pub fn low_on_resource_message(
    signal: Signal,
    quantity: &str,
    available: &str,
    over: &[OverRequest<'_>],
) -> String {
    let resource = resource_name(signal);
    let mut m = format!(
        "The node was low on resource: {resource}. Threshold quantity: {quantity}, available: {available}. "
    );
    for o in over {
        m.push_str(&format!(
            "{} {} was using {}, request is {}, has larger consumption of {resource}. ",
            o.kind, o.name, o.usage, o.request
        ));
    }
    m
}

/// The message of a pressure eviction (qosd's own signals): the stall
/// observed against the threshold, then the pod's memory over its request,
/// in the kubelet's words: "The node had memory pressure: full stall 23.5%
/// of 2s, threshold 10%. Pod x was using 300Mi, request is 100Mi, has
/// larger consumption of memory. "
pub(crate) fn stall_message(
    signal: Signal,
    observed_us: i64,
    window_us: i64,
    threshold: &ThresholdValue,
    over: &[OverRequest<'_>],
) -> String {
    let line = signal.as_str().rsplit('.').next().unwrap_or("some");
    let share = if window_us > 0 {
        observed_us.max(0) as f64 * 100.0 / window_us as f64
    } else {
        0.0
    };
    let (pct, window) = match *threshold {
        ThresholdValue::Stall { share, window } => (
            format!("{}%", (share * 1000.0).round() / 10.0),
            crate::core::duration::format_go_duration(window),
        ),
        _ => (threshold.to_string(), String::new()),
    };
    let mut m = format!(
        "The node had memory pressure: {line} stall {}% of {window}, threshold {pct}. ",
        (share * 10.0).round() / 10.0
    );
    for o in over {
        m.push_str(&format!(
            "{} {} was using {}, request is {}, has larger consumption of memory. ",
            o.kind, o.name, o.usage, o.request
        ));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_print_like_kubernetes() {
        let m = Signal::MemoryAvailable;
        let q = |n: i64| threshold_text(m, &ThresholdValue::Quantity(n), n);
        assert_eq!(q(100 << 20), "100Mi");
        assert_eq!(q(81920 << 10), "80Mi");
        assert_eq!(q(1536 << 10), "1536Ki");
        assert_eq!(q(500_000_000), "500M");
        assert_eq!(q(1001), "1001");
        assert_eq!(q(0), "0");
        // A percentage's threshold and observations are BinarySI.
        assert_eq!(
            threshold_text(m, &ThresholdValue::Percentage(0.1), 500_000_000),
            "500000000"
        );
        assert_eq!(amount_text(m, 99 << 20), "99Mi");
        assert_eq!(amount_text(Signal::NodeFsInodesFree, 4096), "4096");
        assert_eq!(
            threshold_text(Signal::PidAvailable, &ThresholdValue::Quantity(1000), 1000),
            "1000"
        );
    }

    #[test]
    fn one_sentence_per_consumer_over_its_request() {
        let over = [OverRequest {
            kind: "Container",
            name: "web",
            usage: "300Mi".into(),
            request: "256Mi".into(),
        }];
        assert_eq!(
            low_on_resource_message(Signal::MemoryAvailable, "100Mi", "80Mi", &over),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
Container web was using 300Mi, request is 256Mi, has larger consumption of memory. "
        );
        assert_eq!(
            low_on_resource_message(Signal::PidAvailable, "100", "5", &[]),
            "The node was low on resource: pids. Threshold quantity: 100, available: 5. "
        );
    }
}
