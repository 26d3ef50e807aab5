/*
 * Where the vendor library's calls to its own nccl* names land.
 *
 * NCCL calls some of its exported names itself, through its PLT (ncclBcast
 * calls ncclBroadcast, and so on). hetccl exports the same names, first in
 * the global scope under LD_PRELOAD; this program stands in for that (built
 * with -rdynamic, it exports the ABI layer's nccl* the same way). The
 * vendor library is the fake NCCL (fake_nccl.c), whose
 * fake_nccl_call_own() calls ncclGetVersion and ncclCommCount(comm) as NCCL
 * would and reports what they were bound to. Two ways the library arrives:
 *
 *   private: hetccl loads it (RTLD_LOCAL | RTLD_DEEPBIND): its calls bind
 *            inside it. Sanitizer builds open it without RTLD_DEEPBIND, so
 *            there they bind as in the next case.
 *   global:  the program loaded it first with RTLD_GLOBAL, as PyTorch's
 *            wheel does with its NCCL (torch/__init__.py); hetccl's dlopen
 *            returns that copy, whose calls were bound in the global scope:
 *            to hetccl's exports, which must hand them back (the comm by
 *            NCCL's magic word, ncclGetVersion by its caller).
 *
 * Either way the answers must be the fake's own (version 2.28.7, the comm's
 * count), while the program's own ncclGetVersion gets hetccl's (2.28.9).
 *
 * Also, for any vendor library (the real NCCL too, where one is installed:
 * its calls need a GPU, but its bindings do not), every relocation of the
 * library that names a nccl* function this program exports is read back
 * from its GOT: bound inside the library (private) or to this program
 * (global), as LD_DEBUG=bindings would show; the names bound here are
 * printed, they are the calls hetccl must hand back.
 *   HETCCL_NCCL_LIBRARY=build/tests/fake-nccl/libnccl.so.2 test_vendor_bindings private|global
 */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "vendor/vendor.h"

enum { FAKE_VERSION = 22807, ABI_VERSION = 22809 };

/* The ABI layer's exports (src/abi/nccl.c), linked into this program. */
int ncclGetVersion(int *version);
int ncclCommCount(const void *comm, int *count);

typedef int (*call_own_fn)(const void *comm, int *version, int *count, void **version_fn, void **count_fn);

static const char *object_of(void *fn) {
  Dl_info where;
  return fn && dladdr(fn, &where) && where.dli_fname ? where.dli_fname : "?";
}

/* An address of the dynamic section: glibc has made most of them absolute
 * when it loaded the object, but not every port does. */
static uintptr_t dyn_addr(const struct link_map *lm, ElfW(Addr) ptr) {
  return ptr >= lm->l_addr ? ptr : lm->l_addr + ptr;
}

/* Checks where each GOT slot of lib that names a nccl* function this
 * program exports was bound: to lib itself, or to this program when
 * lands_here. Returns how many such slots it read. */
static int check_bindings(void *lib, bool lands_here, const char *mode) {
  struct link_map *lm = NULL;
  if (!CHECK(dlinfo(lib, RTLD_DI_LINKMAP, &lm) == 0 && lm, "dlinfo: %s", dlerror())) return 0;
  const ElfW(Sym) *symtab = NULL;
  const char *strtab = NULL;
  const ElfW(Rela) *tables[2] = {NULL, NULL};
  size_t sizes[2] = {0, 0};
  for (const ElfW(Dyn) *d = lm->l_ld; d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
    case DT_SYMTAB: symtab = (const ElfW(Sym) *)dyn_addr(lm, d->d_un.d_ptr); break;
    case DT_STRTAB: strtab = (const char *)dyn_addr(lm, d->d_un.d_ptr); break;
    case DT_JMPREL: tables[0] = (const ElfW(Rela) *)dyn_addr(lm, d->d_un.d_ptr); break;
    case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
    case DT_RELA: tables[1] = (const ElfW(Rela) *)dyn_addr(lm, d->d_un.d_ptr); break;
    case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
    }
  }
  if (!CHECK(symtab && strtab, "%s: no dynamic symbol table", lm->l_name)) return 0;
  void *program = dlopen(NULL, RTLD_NOW);
  Dl_info own;
  CHECK(dladdr((void *)&object_of, &own), "dladdr of this program");
  char here[4096] = "";
  int slots = 0;
  for (int t = 0; t < 2; t++) {
    for (size_t i = 0; tables[t] && i < sizes[t] / sizeof(ElfW(Rela)); i++) {
      const ElfW(Rela) *r = &tables[t][i];
      const unsigned type = ELF64_R_TYPE(r->r_info), sym = ELF64_R_SYM(r->r_info);
      if (sym == 0 || (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)) continue;
      const char *name = strtab + symtab[sym].st_name;
      void *ours = strncmp(name, "nccl", 4) == 0 ? dlsym(program, name) : NULL;
      Dl_info from;
      if (ours == NULL || !dladdr(ours, &from) || from.dli_fbase != own.dli_fbase) continue; /* not hetccl's */
      void *bound = *(void **)(lm->l_addr + r->r_offset);
      Dl_info where;
      const bool to_program = dladdr(bound, &where) && where.dli_fbase == own.dli_fbase;
      const bool to_lib = dladdr(bound, &where) && (uintptr_t)where.dli_fbase == lm->l_addr;
      slots++;
      if (lands_here)
        CHECK(to_program, "%s: %s of %s bound to %s, want this program (hetccl's export)", mode, name, lm->l_name,
              object_of(bound));
      else CHECK(to_lib, "%s: %s of %s bound to %s, want the library itself", mode, name, lm->l_name, object_of(bound));
      if (to_program && !strstr(here, name) && strlen(here) + strlen(name) + 2 < sizeof(here))
        strcat(strcat(here, " "), name);
    }
  }
  dlclose(program);
  printf("%s: %d GOT slots of %s name a nccl* function hetccl exports; bound to hetccl:%s\n", mode, slots, lm->l_name,
         here[0] ? here : " none");
  return slots;
}

int main(int argc, char **argv) {
  tu_init(argc, argv);
  const bool global = argc > 1 && strcmp(argv[1], "global") == 0;
  if (argc < 2 || (!global && strcmp(argv[1], "private") != 0)) {
    fprintf(stderr, "usage: %s private|global (HETCCL_NCCL_LIBRARY names the fake NCCL)\n", argv[0]);
    return 2;
  }
  tu_set_repro("%s", argv[1]);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const bool deepbind = false;
#else
  const bool deepbind = true;
#endif
  const bool lands_here = global || !deepbind;
  const char *path = hc_param_str(HC_P_NCCL_LIBRARY);
  if (!CHECK(path[0], "HETCCL_NCCL_LIBRARY must name the fake NCCL")) return tu_finish("vendor_bindings");
  void *preloaded = NULL;
  if (global) {
    preloaded = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!CHECK(preloaded, "dlopen %s: %s", path, dlerror())) return tu_finish("vendor_bindings");
  }

  const struct hc_vendor *v = hc_vendor_get(HC_MEM_CUDA);
  if (!CHECK(v, "the fake NCCL at %s did not load: %s", path, hetcclGetLastError(NULL)))
    return tu_finish("vendor_bindings");
  CHECK(v->binds_globally == lands_here, "binds_globally %d, want %d", v->binds_globally, lands_here);
#if defined(__x86_64__)
  CHECK(check_bindings(v->handle, lands_here, argv[1]) > 0, "no GOT slot of %s names a nccl* function", v->path);
#endif
  call_own_fn call_own = (call_own_fn)dlsym(v->handle, "fake_nccl_call_own");
  if (call_own == NULL) { /* the real library: its calls need a GPU */
    printf("%s is not the fake NCCL: bindings checked, calls not made\n", v->path);
    return tu_finish("vendor_bindings");
  }

  CHECK(v->version == FAKE_VERSION, "vendor version %d, want the fake's %d", v->version, FAKE_VERSION);
  hc_vendor_id id;
  void *comm = NULL;
  CHECK(v->get_unique_id(&id) == 0, "fake ncclGetUniqueId");
  if (!CHECK(v->comm_init_rank(&comm, 1, id, 0) == 0 && comm, "fake ncclCommInitRank"))
    return tu_finish("vendor_bindings");

  int version = 0, count = 0;
  void *version_fn = NULL, *count_fn = NULL;
  CHECK(call_own(comm, &version, &count, &version_fn, &count_fn) == 0, "fake_nccl_call_own failed");
  void *own_version = (void *)&ncclGetVersion, *own_count = (void *)&ncclCommCount;
  void *fake_version = dlsym(v->handle, "ncclGetVersion"), *fake_count = dlsym(v->handle, "ncclCommCount");
  printf("%s%s: the fake's ncclGetVersion bound to %s, ncclCommCount to %s\n", argv[1],
         deepbind ? "" : " (no RTLD_DEEPBIND: sanitizer build)", object_of(version_fn), object_of(count_fn));
  if (lands_here) {
    CHECK(version_fn == own_version, "ncclGetVersion of the fake bound to %s, want hetccl's export (this program)",
          object_of(version_fn));
    CHECK(count_fn == own_count, "ncclCommCount of the fake bound to %s, want hetccl's export", object_of(count_fn));
  } else {
    CHECK(version_fn == fake_version, "ncclGetVersion of the fake bound to %s, want the fake itself",
          object_of(version_fn));
    CHECK(count_fn == fake_count, "ncclCommCount of the fake bound to %s, want the fake itself", object_of(count_fn));
  }
  /* Bound inside, or handed back: the fake's answers either way. */
  CHECK(version == FAKE_VERSION, "the fake's own ncclGetVersion call got %d, want its own %d", version, FAKE_VERSION);
  CHECK(count == 1, "the fake's own ncclCommCount call got %d, want 1", count);
  int program_version = 0;
  CHECK(ncclGetVersion(&program_version) == 0 && program_version == ABI_VERSION,
        "the program's ncclGetVersion got %d, want hetccl's %d", program_version, ABI_VERSION);

  CHECK(v->comm_destroy(comm) == 0, "fake ncclCommDestroy");
  if (preloaded) dlclose(preloaded);
  return tu_finish("vendor_bindings");
}
