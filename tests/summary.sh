# Sourced by tests/run-all.sh and tests/run-gpu.sh: the closing lines of a test run from
# its log of "ok NAME" and "FAIL NAME: why" lines. Prints every FAIL again and
# "PREFIXN passed, N failed"; true when something passed and nothing failed.
#
#   ccl_test_summary LOG [PREFIX]
ccl_test_summary() {
    local passed failed
    passed=$(grep -c '^ok ' "$1")
    failed=$(grep -c '^FAIL ' "$1")
    echo
    grep '^FAIL ' "$1" | sed 's/^/  /'
    echo "${2:-}$passed passed, $failed failed"
    [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
}
