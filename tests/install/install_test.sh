#!/bin/sh
# Install test: `cmake --install` the build into a temporary prefix, check the layout, build
# examples/hello-plugin out of tree against the INSTALLED headers only (through pkg-config),
# and run the installed `shadowrt plugins` to show that it loads.
#   install_test.sh <build dir> <source dir> <CMAKE_INSTALL_LIBDIR> <cmake>
set -eu
build=$1 src=$2 libdir=$3 cmake=${4:-cmake}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/srt-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix

fail() {
	echo "install test FAILED: $*" >&2
	exit 1
}

"$cmake" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
	{ cat "$tmp/install.log" >&2; fail "cmake --install $build --prefix $prefix"; }

[ -x "$prefix/bin/shadowrt" ] || fail "no executable $prefix/bin/shadowrt"
[ -d "$prefix/$libdir/shadowrt/plugins" ] || fail "no directory $prefix/$libdir/shadowrt/plugins"
for h in shadowrt plugin model pool attention moe residual tier; do
	[ -f "$prefix/include/shadowrt/$h.h" ] || fail "no header $prefix/include/shadowrt/$h.h"
done
pc=$prefix/$libdir/pkgconfig/shadowrt-plugin.pc
[ -f "$pc" ] || fail "no $pc"

# The numerics SDK: versioned library with its soname, headers, pkg-config file.
so=$prefix/$libdir/libshadowrt-ops.so.1
[ -f "$so" ] || fail "no $so"
readelf -d "$so" | grep -q 'SONAME.*\[libshadowrt-ops\.so\.1\]' || fail "$so has no soname libshadowrt-ops.so.1"
for h in ops ops/fp ops/quant ops/rope ops/norm ops/hadamard ops/gemm ops/act; do
	[ -f "$prefix/include/shadowrt/$h.h" ] || fail "no header $prefix/include/shadowrt/$h.h"
done
[ ! -e "$prefix/include/shadowrt/ops/gemm_isa.h" ] || fail "internal header gemm_isa.h installed"
# only the public API is exported (no ISA kernels, no helpers)
if nm -D --defined-only "$so" | awk '{print $3}' | grep -Ev '^SHADOWRT_OPS_1(\.1)?$' | grep -Eqv '^srt_[a-z0-9_]*@@SHADOWRT_OPS_1(\.1)?$'; then
	fail "$so exports symbols outside SHADOWRT_OPS_1 and 1.1: $(nm -D --defined-only "$so" | grep -Ev 'SHADOWRT_OPS_1(\.1)?$')"
fi
nm -D --defined-only "$so" | grep -q 'srt_weight_fp8_pair@@SHADOWRT_OPS_1\.1$' || fail "$so lacks srt_weight_fp8_pair@@SHADOWRT_OPS_1.1"
nm -D --defined-only "$so" | grep -q 'srt_gemm_ref@@SHADOWRT_OPS_1$' || fail "$so moved srt_gemm_ref out of SHADOWRT_OPS_1"
nm -D --defined-only "$so" | grep -q 'srt_gemmk' && fail "$so exports the internal srt_gemmk_* kernels"

# pkg-config must point into the temporary prefix, whatever CMAKE_INSTALL_PREFIX was.
export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
cflags=$(pkg-config --cflags shadowrt-plugin) || fail "pkg-config --cflags shadowrt-plugin"
echo "pkg-config --cflags shadowrt-plugin: $cflags"
inc=$(pkg-config --variable=includedir shadowrt-plugin)
[ "$(cd "$inc" && pwd -P)" = "$(cd "$prefix/include" && pwd -P)" ] ||
	fail "includedir $inc is not $prefix/include"
plugindir=$(pkg-config --variable=plugindir shadowrt-plugin)
[ "$(cd "$plugindir" && pwd -P)" = "$(cd "$prefix/$libdir/shadowrt/plugins" && pwd -P)" ] ||
	fail "plugindir $plugindir is not $prefix/$libdir/shadowrt/plugins"

pkg-config --exists shadowrt-ops || fail "pkg-config cannot find shadowrt-ops"
# Every SDK header compiles alone under the project's warnings, the library links and runs.
sdk_cflags=$(pkg-config --cflags shadowrt-ops) sdk_libs=$(pkg-config --libs shadowrt-ops)
sdk_libdir=$(cd "$(pkg-config --variable=libdir shadowrt-ops)" && pwd -P)
${CC:-cc} -std=c11 -Wall -Wextra -Werror $sdk_cflags -o "$tmp/sdk_check" "$src/tests/install/sdk_check.c" \
	$sdk_libs "-Wl,-rpath,$sdk_libdir" >"$tmp/cc.log" 2>&1 || { cat "$tmp/cc.log" >&2; fail "build sdk_check against the installed SDK"; }
case "$sdk_cflags" in *"$src"*) fail "shadowrt-ops cflags point into the source tree: $sdk_cflags" ;; esac
ldd "$tmp/sdk_check" | grep -q "$(cd "$prefix/$libdir" && pwd -P)/libshadowrt-ops.so.1\|$prefix/$libdir/libshadowrt-ops.so.1" ||
	fail "sdk_check does not load the installed library: $(ldd "$tmp/sdk_check")"
"$tmp/sdk_check" | grep -q '^sdk ok 101 ' || fail "sdk_check did not run"

# The example, copied away from the source tree so only installed headers can be found.
cp -R "$src/examples/hello-plugin" "$tmp/hello"
make -C "$tmp/hello" >"$tmp/make.log" 2>&1 || { cat "$tmp/make.log" >&2; fail "make hello-plugin"; }
cat "$tmp/make.log"
case "$(cat "$tmp/make.log")" in
*"$src/abi"*) fail "the example was compiled with the source tree's headers" ;;
esac
mkdir "$tmp/myplugins"
cp "$tmp/hello/hello.so" "$tmp/myplugins/"

out=$("$prefix/bin/shadowrt" plugins --plugin-dir "$tmp/myplugins") || fail "shadowrt plugins exited $?"
echo "$out"
echo "$out" | grep -Eq "^  residual +hello +1\.0\.0 +1\.[0-9]+ +$tmp/myplugins/hello\.so" ||
	fail "the installed shadowrt did not list the hello plugin as found"
echo "$out" | grep -q "$(cd "$prefix" && pwd -P)/$libdir/shadowrt/plugins (next to the executable)" ||
	fail "the installed shadowrt does not search its own prefix's plugin directory"

# `make install` puts it in the prefix's plugin dir, where it is found with no option at all.
make -C "$tmp/hello" install >/dev/null || fail "make install"
"$prefix/bin/shadowrt" plugins | grep -Eq "^  residual +hello " ||
	fail "hello.so installed into $plugindir is not found by default"
echo "install test passed"
