/* Every rank's rex_init_comm code, printed on standard output, never
 * aborting the job: tests/it/mpi.rs checks that a rank that cannot start
 * fails every rank's start alike, at once. */
#include <mpi.h>
#include <rex.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rc = rex_init_comm(NULL, MPI_Comm_c2f(MPI_COMM_WORLD));
    printf("rank %d: rex_init_comm %d: %s\n", rank, rc, rc == REX_OK ? "" : rex_last_error());
    fflush(stdout);
    if (rc == REX_OK)
        rex_finalize();
    MPI_Finalize();
    return 0;
}
