# Shared by the busybox VM scripts (prepended to evict_v2.sh, pressure_v2.sh
# and run_v2.sh by their tests): helpers that wait on what the daemon did.
# Each script defines http_get (GET a path from its qosd) before use.

# qosd_reconciles_total of the script's qosd (retried: a short read has no
# counter; 0 at last).
reconciles() {
    for _ in 1 2 3 4 5; do
        n=$(http_get /metrics | tr -d '\r' | awk '$1 == "qosd_reconciles_total" { print int($2); exit }')
        [ -n "$n" ] && { echo "$n"; return; }
        sleep 0.1
    done
    echo 0
}
