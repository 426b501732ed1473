/* Byte sizes (size.h). */
#include "config/size.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include <shadowrt/plugin.h>

static int bad(const char *s, char *err, size_t errlen, const char *why)
{
	if (err && errlen)
		snprintf(err, errlen, "'%.64s%s': %s", s, strlen(s) > 64 ? "..." : "", why);
	return SRT_EINVAL;
}

/* a *= m, refusing results above SRT_SIZE_MAX; 0 or -1 */
static int mul_ok(unsigned __int128 *a, uint64_t m)
{
	*a *= m;
	return *a > SRT_SIZE_MAX ? -1 : 0;
}

int srt_size_parse(const char *s, uint64_t *out, char *err, size_t errlen)
{
	static const char units[] = "KMGTPE";
	const char *p = s;
	unsigned __int128 whole = 0, frac = 0, frac_div = 1;
	int digits = 0;

	if (!s)
		return bad("", err, errlen, "no value");
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '-' || *p == '+')
		return bad(s, err, errlen, "expected a size without a sign, e.g. 4GiB");
	for (; isdigit((unsigned char)*p); p++, digits++) {
		whole = whole * 10 + (unsigned)(*p - '0');
		if (whole > SRT_SIZE_MAX)
			return bad(s, err, errlen, "larger than the largest size (8 EiB)");
	}
	if (*p == '.') {
		p++;
		for (int nf = 0; isdigit((unsigned char)*p); p++, digits++, nf++) {
			if (nf >= 18)
				return bad(s, err, errlen, "more than 18 decimals");
			frac = frac * 10 + (unsigned)(*p - '0');
			frac_div *= 10;
		}
	}
	if (!digits)
		return bad(s, err, errlen,
			   "expected a number of bytes with an optional unit (B, KB, KiB, MB, MiB, "
			   "GB, GiB, ...)");
	while (*p == ' ')
		p++;
	if ((*p == 'e' || *p == 'E') && (isdigit((unsigned char)p[1]) || p[1] == '-' || p[1] == '+'))
		return bad(s, err, errlen, "exponents are not accepted (write e.g. 200GB or 1.5TiB)");
	uint64_t base = 1;
	int power = 0;
	const char *u = *p ? strchr(units, toupper((unsigned char)*p)) : NULL;
	if (u) {
		power = (int)(u - units) + 1;
		p++;
		if (*p == 'i' || *p == 'I') {
			p++;
			if (*p != 'B' && *p != 'b')
				return bad(s, err, errlen, "unknown unit (expected KiB, MiB, GiB, ...)");
			p++;
			base = 1024;
		} else if (*p == 'B' || *p == 'b') {
			p++;
			base = 1000; /* SI: 1 GB = 10^9 bytes */
		} else {
			base = 1024; /* a bare K, M, G, T: powers of 1024 */
		}
	} else if (*p == 'B' || *p == 'b') {
		p++;
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p)
		return bad(s, err, errlen,
			   "unknown unit or trailing characters (expected B, KB, KiB, MB, MiB, GB, "
			   "GiB, TB, TiB, ...)");
	unsigned __int128 v = whole, f = frac;
	for (int i = 0; i < power; i++)
		if (mul_ok(&v, base) || (f *= base, 0))
			return bad(s, err, errlen, "larger than the largest size (8 EiB)");
	if (f % frac_div)
		return bad(s, err, errlen, "not a whole number of bytes");
	v += f / frac_div;
	if (v > SRT_SIZE_MAX)
		return bad(s, err, errlen, "larger than the largest size (8 EiB)");
	*out = (uint64_t)v;
	return 0;
}
