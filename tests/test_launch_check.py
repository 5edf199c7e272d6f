"""distla refuses to run when the launcher started more (or fewer) tasks than MPI's COMM_WORLD
has ranks (e.g. srun with a PMI plugin that the MPI library does not speak)."""
import pytest

from distla import ProcessGrid
from distla.errors import DistlaError
from distla.grid import LAUNCH_SIZE_VARS, check_launch

MPICH = "MPICH Version:      4.3.0\nMPICH Release date: ..."
OPENMPI = "Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4"


@pytest.mark.parametrize("env, size", [
    ({}, 1),                                              # no launcher: a singleton
    ({}, 4),
    ({"PMI_SIZE": "2"}, 2),                               # mpiexec (Hydra), srun --mpi=pmi2
    ({"OMPI_COMM_WORLD_SIZE": "3"}, 3),                   # Open MPI's mpirun
    ({"SLURM_STEP_NUM_TASKS": "4"}, 4),                   # srun --mpi=pmix
    ({"SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, 1),      # the batch script's own process
    ({"PMI_SIZE": "2", "SLURM_STEP_NUM_TASKS": "1"}, 2),  # mpiexec inside a one-task srun step
    ({"SLURM_STEP_NUM_TASKS": "2", "DISTLA_LAUNCH_CHECK": "0"}, 1),
])
def test_consistent_launch_passes(env, size):
    check_launch(size, env, MPICH)


@pytest.mark.parametrize("var", LAUNCH_SIZE_VARS)
@pytest.mark.parametrize("library, hint", [(MPICH, "--mpi=pmi2"), (OPENMPI, "--mpi=pmix"),
                                           ("Some MPI 1.0", "srun --mpi=list")])
def test_mismatch_names_the_pmi(var, library, hint):
    with pytest.raises(DistlaError) as e:
        check_launch(1, {var: "2"}, library)
    msg = str(e.value)
    assert f"{var}=2" in msg and "1 rank" in msg and hint in msg
    assert " ".join(library.splitlines()[0].split()) in msg


@pytest.mark.mpi
def test_grid_refuses_on_every_rank(comm, monkeypatch):
    for var in LAUNCH_SIZE_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("DISTLA_LAUNCH_CHECK", raising=False)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", str(comm.size + 1))
    with pytest.raises(DistlaError, match=rf"started {comm.size + 1} tasks .* {comm.size} rank"):
        ProcessGrid(comm=comm)
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", str(comm.size))
    g = ProcessGrid(comm=comm)   # the real launch is consistent
    assert g.nprow * g.npcol == comm.size
