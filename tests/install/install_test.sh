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
echo "$out" | grep -Eq "^  residual +hello +1\.0\.0 +1\.0 +$tmp/myplugins/hello\.so" ||
	fail "the installed shadowrt did not list the hello plugin as found"
echo "$out" | grep -q "$(cd "$prefix" && pwd -P)/$libdir/shadowrt/plugins (next to the executable)" ||
	fail "the installed shadowrt does not search its own prefix's plugin directory"

# `make install` puts it in the prefix's plugin dir, where it is found with no option at all.
make -C "$tmp/hello" install >/dev/null || fail "make install"
"$prefix/bin/shadowrt" plugins | grep -Eq "^  residual +hello " ||
	fail "hello.so installed into $plugindir is not found by default"
echo "install test passed"
