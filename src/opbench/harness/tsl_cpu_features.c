/* TensorFlow's answer to "does this CPU have feature F?", as a CPU at an instruction-set cap would give
 * it (opbench.harness.isa). TensorFlow picks its kernels by those answers, read from CPUID, not from
 * oneDNN's capped level: it turns its oneDNN operations on by default only where the CPU has AVX-512
 * VNNI, AVX-512 BF16, AVX-VNNI or AMX, and sends bfloat16 to oneDNN wherever it has AVX-512F. Loaded
 * with LD_PRELOAD, this definition of tsl::port::TestCPUFeature comes before TensorFlow's own (every
 * call to it goes through the procedure linkage table) and answers "no" for each feature that TSL's
 * enumeration numbers at or after OPBENCH_TSL_HIDDEN_FROM (27, AVX512F, for the AVX2 cap); every
 * other answer is TensorFlow's own. Without that variable it hides nothing. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define TEST_CPU_FEATURE "_ZN3tsl4port14TestCPUFeatureENS0_10CPUFeatureE"

typedef bool (*test_cpu_feature)(int);

bool _ZN3tsl4port14TestCPUFeatureENS0_10CPUFeatureE(int feature) {
  static test_cpu_feature own;
  static int hidden_from = -1;
  if (hidden_from < 0) {
    const char *from = getenv("OPBENCH_TSL_HIDDEN_FROM");
    int first = from ? atoi(from) : 0;
    hidden_from = first > 0 ? first : 1 << 30; /* unset or not a feature's number: nothing hidden */
  }
  if (feature >= hidden_from) return false;
  if (!own) own = (test_cpu_feature)dlsym(RTLD_NEXT, TEST_CPU_FEATURE);
  if (!own) { /* TensorFlow's library is loaded with RTLD_LOCAL: ask it by name */
    void *framework = dlopen("libtensorflow_framework.so.2", RTLD_NOLOAD | RTLD_LAZY);
    if (framework) own = (test_cpu_feature)dlsym(framework, TEST_CPU_FEATURE);
  }
  if (!own) {
    fputs("opbench's TensorFlow CPU-feature shim found no tsl::port::TestCPUFeature to ask\n", stderr);
    abort();
  }
  return own(feature);
}
