# The step harness both device scripts share (sourced): every step has its own time limit and
# writes its log under $L; after every step the whole of results/ is packed into $O/all.tgz (a
# step that overruns still leaves the others' results), and $O/steps.txt lists the steps with
# their exit status (124/137: the limit ran out).
#   O (where packs go, the device's $OUT), L (the log directory) must be set by the caller.
step() {  # step NAME SECONDS command...
  local name=$1 secs=$2; shift 2
  echo "[$(date -u +%H:%M:%S)] $name (limit ${secs}s)" | tee -a "$O/steps.txt"
  timeout -k 5 "$secs" "$@" > "$L/$name.log" 2>&1
  local rc=$?  # before anything else: $(date) below would reset $? to 0
  echo "[$(date -u +%H:%M:%S)]   $name exit $rc" | tee -a "$O/steps.txt"
  tar czf "$O/all.tgz" results 2>/dev/null
  return $rc
}
# last_ok: 0 when the last step recorded in $O/steps.txt exited 0 (for loops that stop at the
# first failure, e.g. the first out-of-memory in a search for the largest size that fits).
last_ok() { tail -1 "$O/steps.txt" | grep -q " exit 0$"; }
