# Source in a GPU script: run LIMIT CMD... runs CMD for at most LIMIT seconds and what is left
# of ${BUDGET} seconds since the script started (skipped when under 15 s are left), and prints
# the last ${RUN_TAIL:-4} lines of its result rows and errors (the call never outlives the
# device tool's 10-minute limit).
run() {
  local left=$((BUDGET - SECONDS)) lim=$1; shift
  [ "$left" -lt "$lim" ] && lim=$left
  if [ "$lim" -lt 15 ]; then echo "skipped (budget): $*"; return; fi
  timeout "$lim" "$@" 2>&1 | grep -E "^ *(bench|matmul|cholesky|lu) |distla|cupy|cusolver|Error|error" \
      | tail -"${RUN_TAIL:-4}"
}
