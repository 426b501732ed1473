/*
 * exec/l1pages.h: the engine's L1 page slabs. Pages are zeroed (also when reused), 64-byte
 * aligned, disjoint; slabs are 2 MiB aligned, advised onto huge pages when asked (the VMA's
 * "hg" flag in /proc/self/smaps), given back when all their pages are free (one spare per
 * size kept); large pages waste little; running out of address space gives SRT_ENOMEM and
 * leaves the allocator usable.
 */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <shadowrt/plugin.h>

#include "ckpt/safetensors.h"
#include "exec/l1pages.h"
#include "radix/radix.h"

#define MIB ((size_t)1 << 20)

static void *get(const struct srt_rdx_allocator *a, uint32_t pool, size_t bytes)
{
	void *p = NULL;
	ck_assert_int_eq(a->alloc(a->ctx, pool, bytes, &p), 0);
	ck_assert_ptr_nonnull(p);
	return p;
}

static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

START_TEST(test_pages_zeroed_aligned_disjoint)
{
	struct srt_l1_pages *lp = srt_l1_pages_create(1);
	ck_assert_ptr_nonnull(lp);
	const struct srt_rdx_allocator *a = srt_l1_pages_allocator(lp);
	enum { N = 300 };
	const size_t sz[2] = {13 * 1024 + 8, 112 * 1024}; /* an indexer page, a CSA page */
	uint8_t *p[N];
	for (int i = 0; i < N; i++) {
		size_t b = sz[i % 2];
		p[i] = get(a, (uint32_t)(i % 2), b);
		ck_assert_uint_eq((uintptr_t)p[i] % 64, 0);
		ck_assert(all_zero(p[i], b));
		memset(p[i], 0xA0 + i % 16, b);
	}
	/* disjoint: every page still holds its own pattern */
	for (int i = 0; i < N; i++)
		for (size_t k = 0; k < sz[i % 2]; k += 997)
			ck_assert_uint_eq(p[i][k], 0xA0 + i % 16);
	struct srt_l1_pages_stats st;
	srt_l1_pages_stats(lp, &st);
	ck_assert_uint_eq(st.in_use, N);
	ck_assert_uint_eq(st.classes, 2);
	ck_assert_uint_eq(st.mapped % (2 * MIB), 0);
	/* a freed page comes back (once the slab being carved is full) zeroed */
	a->free(a->ctx, 1, p[1], sz[1]);
	uint8_t *q = NULL;
	for (int i = 0; i < 64 && q != p[1]; i++) {
		q = get(a, 1, sz[1]);
		ck_assert(all_zero(q, sz[1]));
	}
	ck_assert_ptr_eq(q, p[1]);
	srt_l1_pages_destroy(lp);
}
END_TEST

START_TEST(test_free_slabs_are_unmapped_but_one_spare)
{
	struct srt_l1_pages *lp = srt_l1_pages_create(0);
	const struct srt_rdx_allocator *a = srt_l1_pages_allocator(lp);
	const size_t b = 100 * 1024;
	enum { N = 100 }; /* 20 pages a 2 MiB slab: 5 slabs */
	void *p[N];
	for (int i = 0; i < N; i++)
		p[i] = get(a, 0, b);
	struct srt_l1_pages_stats st;
	srt_l1_pages_stats(lp, &st);
	ck_assert_uint_eq(st.slabs, 5);
	ck_assert_uint_eq(st.mapped, 10 * MIB);
	for (int i = 0; i < N; i++)
		a->free(a->ctx, 0, p[i], b);
	srt_l1_pages_stats(lp, &st);
	ck_assert_uint_eq(st.in_use, 0);
	ck_assert_uint_eq(st.slabs, 1); /* the spare */
	ck_assert_uint_eq(st.mapped, 2 * MIB);
	/* and it serves again, zeroed */
	for (int i = 0; i < N; i++) {
		p[i] = get(a, 0, b);
		ck_assert(all_zero(p[i], b));
	}
	srt_l1_pages_stats(lp, &st);
	ck_assert_uint_eq(st.slabs, 5);
	srt_l1_pages_destroy(lp);
}
END_TEST

/* Large pages: slabs are multiples of 2 MiB holding several pages, little left over. */
START_TEST(test_large_pages_waste_little)
{
	const size_t sizes[] = {300 * 1024, 2 * MIB + 4096, 3 * MIB, 7 * MIB + 64};
	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		struct srt_l1_pages *lp = srt_l1_pages_create(0);
		const struct srt_rdx_allocator *a = srt_l1_pages_allocator(lp);
		enum { N = 40 };
		uint8_t *p[N];
		for (int i = 0; i < N; i++) {
			p[i] = get(a, 0, sizes[t]);
			p[i][0] = p[i][sizes[t] - 1] = 1;
		}
		struct srt_l1_pages_stats st;
		srt_l1_pages_stats(lp, &st);
		ck_assert_uint_eq(st.mapped % (2 * MIB), 0);
		/* mapped, less the last slab's unused pages, within 1/16 of the pages' bytes */
		double used = (double)N * (double)((sizes[t] + 63) / 64 * 64);
		ck_assert_msg((double)st.mapped <= used * 17.0 / 16.0 + (double)st.mapped / (double)st.slabs,
			      "page %zu: %zu bytes mapped for %.0f", sizes[t], st.mapped, used);
		srt_l1_pages_destroy(lp);
	}
}
END_TEST

/* huge = 1: the slab's mapping carries MADV_HUGEPAGE (VmFlags "hg"); huge = 0 does not. */
static int vma_has_hg(const void *addr)
{
	FILE *fp = fopen("/proc/self/smaps", "r");
	if (!fp)
		return -1;
	char line[512];
	int in = 0, hg = -1;
	while (fgets(line, sizeof(line), fp)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) { /* a mapping's first line */
			in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
			continue;
		}
		if (in && !strncmp(line, "VmFlags:", 8)) {
			hg = strstr(line, " hg") != NULL;
			break;
		}
	}
	fclose(fp);
	return hg;
}

START_TEST(test_huge_slabs_are_advised)
{
	if (!srt_ck_thp_usable())
		return; /* the kernel refuses MADV_HUGEPAGE: nothing to see */
	for (int huge = 0; huge <= 1; huge++) {
		struct srt_l1_pages *lp = srt_l1_pages_create(huge);
		const struct srt_rdx_allocator *a = srt_l1_pages_allocator(lp);
		uint8_t *p = get(a, 0, 64 * 1024);
		ck_assert_uint_eq((uintptr_t)p % (2 * MIB), 0); /* the slab's first page */
		p[0] = 1;
		ck_assert_int_eq(vma_has_hg(p), huge);
		srt_l1_pages_destroy(lp);
	}
}
END_TEST

/* With the address space nearly used up, an allocation that needs a new slab fails with
 * SRT_ENOMEM and the pages already handed out stay good (in a child: RLIMIT_AS). */
START_TEST(test_enomem_when_no_slab_can_be_mapped)
{
	pid_t pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct srt_l1_pages *lp = srt_l1_pages_create(0);
		const struct srt_rdx_allocator *a = srt_l1_pages_allocator(lp);
		void *first = NULL;
		if (a->alloc(a->ctx, 0, 512 * 1024, &first))
			_exit(2);
		memset(first, 7, 512 * 1024);
		struct rlimit rl = {64 * MIB, 64 * MIB};
		/* the limit counts what is mapped already: leave room for little more */
		FILE *fp = fopen("/proc/self/statm", "r");
		unsigned long vm_pages = 0;
		if (!fp || fscanf(fp, "%lu", &vm_pages) != 1)
			_exit(3);
		fclose(fp);
		rl.rlim_cur = rl.rlim_max = vm_pages * (unsigned long)sysconf(_SC_PAGESIZE) + 8 * MIB;
		if (setrlimit(RLIMIT_AS, &rl))
			_exit(4);
		int rc = 0;
		void *p;
		for (int i = 0; i < 10000 && rc == 0; i++)
			rc = a->alloc(a->ctx, 0, 512 * 1024, &p);
		if (rc != SRT_ENOMEM)
			_exit(5);
		for (size_t k = 0; k < 512 * 1024; k++)
			if (((uint8_t *)first)[k] != 7)
				_exit(6);
		a->free(a->ctx, 0, first, 512 * 1024); /* room again in its slab */
		if (a->alloc(a->ctx, 0, 512 * 1024, &p) || p != first)
			_exit(7);
		srt_l1_pages_destroy(lp);
		_exit(0);
	}
	int status = 0;
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status));
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

static Suite *l1pages_suite(void)
{
	Suite *s = suite_create("l1pages");
	TCase *tc = tcase_create("l1pages");
	tcase_set_timeout(tc, 0);
	tcase_add_test(tc, test_pages_zeroed_aligned_disjoint);
	tcase_add_test(tc, test_free_slabs_are_unmapped_but_one_spare);
	tcase_add_test(tc, test_large_pages_waste_little);
	tcase_add_test(tc, test_huge_slabs_are_advised);
	tcase_add_test(tc, test_enomem_when_no_slab_can_be_mapped);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(l1pages_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
