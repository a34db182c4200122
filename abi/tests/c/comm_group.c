/* rankwire-test: ranks=1,3,4 */
/* Communicators, groups, attributes, names, error handlers through the standard ABI. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int checks = 0, rank, size;
#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "rank %d: check failed at line %d: ", rank, __LINE__); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); MPI_Abort(MPI_COMM_WORLD, 1); } checks++; } while (0)

static int copies = 0, deletes = 0;
static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
  (void)c; (void)k; (void)extra;
  copies++;
  *(void **)out = (void *)((char *)in + 1);
  *flag = 1;
  return MPI_SUCCESS;
}
static int delete_fn(MPI_Comm c, int k, void *v, void *extra) {
  (void)c; (void)k; (void)v; (void)extra;
  deletes++;
  return MPI_SUCCESS;
}
static int handler_calls = 0;
static void on_error(MPI_Comm *c, int *code, ...) { (void)c; (void)code; handler_calls++; }

int main(int argc, char **argv) {
  int flag;
  MPI_Initialized(&flag);
  CHECK(!flag, "initialized before init");
  MPI_Init(&argc, &argv);
  MPI_Initialized(&flag);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(flag, "not initialized after init");

  /* SELF */
  int r, s;
  MPI_Comm_rank(MPI_COMM_SELF, &r);
  MPI_Comm_size(MPI_COMM_SELF, &s);
  CHECK(r == 0 && s == 1, "self %d %d", r, s);

  /* dup + compare + name */
  MPI_Comm d;
  MPI_Comm_dup(MPI_COMM_WORLD, &d);
  int res;
  MPI_Comm_compare(MPI_COMM_WORLD, d, &res);
  CHECK(res == MPI_CONGRUENT, "dup compare %d", res);
  MPI_Comm_compare(d, d, &res);
  CHECK(res == MPI_IDENT, "self compare %d", res);
  char name[MPI_MAX_OBJECT_NAME];
  int len;
  MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
  CHECK(strcmp(name, "MPI_COMM_WORLD") == 0 && len == 14, "world name %s", name);
  MPI_Comm_set_name(d, "mine");
  MPI_Comm_get_name(d, name, &len);
  CHECK(strcmp(name, "mine") == 0, "set name %s", name);

  /* split by parity, reversed key order */
  MPI_Comm sp;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &sp);
  MPI_Comm_rank(sp, &r);
  MPI_Comm_size(sp, &s);
  int expect_size = (size + 1 - rank % 2) / 2;
  CHECK(s == expect_size, "split size %d want %d", s, expect_size);
  /* highest world rank of my parity is rank 0 */
  int top = (size - 1) - ((size - 1 - rank % 2) % 2);
  CHECK(r == (top - rank) / 2, "split rank %d", r);
  MPI_Comm und;
  MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? MPI_UNDEFINED : 1, 0, &und);
  CHECK((rank == 0) == (und == MPI_COMM_NULL), "undefined color");
  if (und != MPI_COMM_NULL) MPI_Comm_free(&und);

  /* split_type shared: all ranks on one node here */
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &s);
  MPI_Comm_rank(node, &r);
  CHECK(s == size && r == rank, "node comm %d %d", s, r);

  /* groups: incl/excl/union/translate/compare, comm_create */
  MPI_Group wg, g1, g2, gu;
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  int evens[64], ne = 0;
  for (int i = 0; i < size; i += 2) evens[ne++] = i;
  MPI_Group_incl(wg, ne, evens, &g1);
  MPI_Group_excl(wg, ne, evens, &g2);
  MPI_Group_union(g1, g2, &gu);
  MPI_Group_size(gu, &s);
  CHECK(s == size, "union size %d", s);
  MPI_Group_compare(gu, wg, &res);
  CHECK(res == (size > 2 ? MPI_SIMILAR : MPI_IDENT), "union compare %d", res);
  int in[2] = {0, ne - 1}, out[2];
  MPI_Group_translate_ranks(g1, 2, in, wg, out);
  CHECK(out[0] == 0 && out[1] == evens[ne - 1], "translate %d %d", out[0], out[1]);
  MPI_Group_rank(g1, &r);
  CHECK(r == (rank % 2 == 0 ? rank / 2 : MPI_UNDEFINED), "group rank %d", r);
  MPI_Comm ec;
  MPI_Comm_create(MPI_COMM_WORLD, g1, &ec);
  CHECK((rank % 2 == 0) == (ec != MPI_COMM_NULL), "comm_create membership");
  if (ec != MPI_COMM_NULL) {
    MPI_Comm_size(ec, &s);
    CHECK(s == ne, "created size %d", s);
    MPI_Comm_free(&ec);
    CHECK(ec == MPI_COMM_NULL, "free sets NULL");
  }
  MPI_Group_free(&g1); MPI_Group_free(&g2); MPI_Group_free(&gu); MPI_Group_free(&wg);
  CHECK(wg == MPI_GROUP_NULL, "group free sets NULL");

  /* attributes: predefined and user keyvals with copy/delete callbacks */
  int *tag_ub;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  CHECK(flag && *tag_ub >= 32767, "tag_ub %d", flag ? *tag_ub : -1);
  int key;
  MPI_Comm_create_keyval(copy_fn, delete_fn, &key, NULL);
  MPI_Comm_set_attr(d, key, (void *)(size_t)100);
  MPI_Comm d2;
  MPI_Comm_dup(d, &d2);
  void *v;
  MPI_Comm_get_attr(d2, key, &v, &flag);
  CHECK(flag && (size_t)v == 101 && copies == 1, "copied attribute %zu", (size_t)v);
  MPI_Comm_get_attr(MPI_COMM_WORLD, key, &v, &flag);
  CHECK(!flag, "attribute on world");
  MPI_Comm_free(&d2);
  CHECK(deletes == 1, "delete callback on free: %d", deletes);
  MPI_Comm_delete_attr(d, key);
  CHECK(deletes == 2, "delete callback on delete_attr: %d", deletes);
  MPI_Comm_free_keyval(&key);
  CHECK(key == MPI_KEYVAL_INVALID, "free_keyval");

  /* error handlers: user handler called, then return codes */
  MPI_Errhandler eh;
  MPI_Comm_create_errhandler(on_error, &eh);
  MPI_Comm_set_errhandler(d, eh);
  int x = 0;
  int rc = MPI_Send(&x, 1, MPI_INT, size + 5, 0, d);
  CHECK(rc != MPI_SUCCESS && handler_calls == 1, "user handler rc %d calls %d", rc, handler_calls);
  MPI_Errhandler got;
  MPI_Comm_get_errhandler(d, &got);
  CHECK(got == eh, "get_errhandler");
  MPI_Errhandler_free(&eh);
  MPI_Comm_set_errhandler(d, MPI_ERRORS_RETURN);
  /* An invalid communicator raises the error on MPI_COMM_SELF (MPI 4.1 9.3). */
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  rc = MPI_Comm_rank(MPI_COMM_NULL, &r);
  int cls;
  MPI_Error_class(rc, &cls);
  CHECK(cls == MPI_ERR_COMM, "MPI_COMM_NULL gave class %d", cls);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
  MPI_Comm_free(&d);
  MPI_Comm_free(&sp);
  MPI_Comm_free(&node);

  /* misc environment */
  int ver, sub;
  MPI_Get_version(&ver, &sub);
  CHECK(ver == 5 && sub == 0, "version %d.%d", ver, sub);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  MPI_Get_library_version(lib, &len);
  CHECK(strstr(lib, "rankwire") != NULL, "library %s", lib);
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Get_processor_name(host, &len);
  CHECK(len > 0, "processor name");
  double t0 = MPI_Wtime();
  CHECK(MPI_Wtime() >= t0 && MPI_Wtick() > 0, "wtime");

  if (rank == 0) printf("comm_group: ok, %d checks\n", checks);
  MPI_Finalize();
  MPI_Finalized(&flag);
  CHECK(flag, "finalized");
  return 0;
}
