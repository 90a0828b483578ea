# Shared by tools/run, tools/test and tools/bench: install what is missing, build.
# Sourced, not run.

SBXD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages the build, the tests and the benchmark need.
SBXD_DEPS=(build-essential cmake pkg-config libmicrohttpd-dev libcjson-dev libseccomp-dev
    libcap-ng-dev check libcurl4-openssl-dev clang-format)
# What tools/test needs on top: the conformance tier (tests/conformance) is Python with
# Debian's YAML and JSON Schema modules (the /v1 OpenAPI contract is validated with them).
# shellcheck disable=SC2034 # used by tools/test
SBXD_TEST_DEPS=(python3 python3-yaml python3-jsonschema)

sbxd_install_deps() {
    local missing=()
    for p in "${SBXD_DEPS[@]}" "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "== installing: ${missing[*]}"
    if [ "$(id -u)" -ne 0 ]; then
        echo "tools: need root to install ${missing[*]} (or install them yourself)" >&2
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The libmicrohttpd to build against: one without HTTPS (tools/build-mhd) when it can be
# built here, else the system's, with a warning (sbxd works the same, with ~2.3 MiB more
# resident memory). Sets SBXD_MHD_PREFIX ("" for the system's).
sbxd_mhd() {
    if [ -z "${SBXD_MHD_PREFIX+set}" ]; then
        if SBXD_MHD_PREFIX=$("$SBXD_ROOT/tools/build-mhd"); then
            :
        else
            echo "tools: warning: could not build libmicrohttpd without HTTPS; using the" \
                "system's (idle RSS is ~2.3 MiB higher)" >&2
            SBXD_MHD_PREFIX=""
        fi
    fi
    export SBXD_MHD_PREFIX
}

# sbxd_build DIR [cmake args...]: configure and build (incrementally).
sbxd_build() {
    local dir=$1
    shift
    sbxd_mhd
    cmake -S "$SBXD_ROOT" -B "$dir" -DSBXD_MHD_PREFIX="$SBXD_MHD_PREFIX" "$@" >/dev/null
    cmake --build "$dir" -j"$(nproc)"
}
