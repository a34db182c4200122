/* libver.c: prints which MPI library this process really loaded, for
 * benches/peers/osu-abi.sh: MPI_Get_library_version of rank 0, and the path of the
 * shared object that defines MPI_Init (dladdr), so that a run through the standard
 * ABI says whether LD_LIBRARY_PATH picked rankwire's or MPICH's libmpi_abi.so.1. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    char ver[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, rank = 0, size = 0;
    Dl_info info;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_library_version(ver, &len);
    for (int i = 0; i < len; i++)
        if (ver[i] == '\n' || ver[i] == '\t') ver[i] = ' ';
    if (len > 160) ver[160] = '\0';
    memset(&info, 0, sizeof info);
    if (rank == 0) {
        dladdr((void *)&MPI_Init, &info);
        printf("size=%d\tlib=%s\tversion=%s\n", size, info.dli_fname ? info.dli_fname : "?", ver);
    }
    MPI_Finalize();
    return 0;
}
