# Shared by tools/run, tools/test and tools/bench: install what is missing, build.
# Sourced, not run.

SBXD_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Debian packages the build, the tests and the benchmark need.
SBXD_DEPS=(build-essential cmake pkg-config libmicrohttpd-dev libcjson-dev libseccomp-dev
    libcap-ng-dev check libcurl4-openssl-dev clang-format patch)
# What tools/test needs on top: the conformance tier (tests/conformance) is Python with
# Debian's YAML and JSON Schema modules (the /v1 OpenAPI contract is validated with them);
# the fuzz tier (tests/fuzz) is clang with its libFuzzer runtime; the soak tier (tools/soak)
# runs sbxd under valgrind's memcheck.
# shellcheck disable=SC2034 # used by tools/test
SBXD_TEST_DEPS=(python3 python3-yaml python3-jsonschema clang libclang-rt-14-dev valgrind)

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

# The container image and its tiers (tools/build-image, tests/container/run, tests/k8s/run).
# podman builds and runs the image (rootful, chroot isolation, no registry needed);
# debootstrap makes the Debian base from the machine's own apt mirror; runsc runs the image
# under gVisor; python3 with YAML and JSON Schema checks the Kubernetes manifests.
# shellcheck disable=SC2034 # used by the image tools
SBXD_IMAGE_DEPS=(podman debootstrap debian-archive-keyring)
# shellcheck disable=SC2034
SBXD_CONTAINER_TEST_DEPS=(runsc curl python3 python3-yaml)
# shellcheck disable=SC2034
SBXD_K8S_TEST_DEPS=(python3 python3-yaml python3-jsonschema)

# sbxd_install_pkgs PKG...: install those of PKG... that are missing (and nothing else).
sbxd_install_pkgs() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "== installing: ${missing[*]}" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "tools: need root to install ${missing[*]} (or install them yourself)" >&2
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
}

# sbxd_install_image_deps [PKG...]: SBXD_IMAGE_DEPS and PKG..., where missing (not the build
# dependencies: the image builds inside itself).
sbxd_install_image_deps() {
    sbxd_install_pkgs "${SBXD_IMAGE_DEPS[@]}" "$@"
}
