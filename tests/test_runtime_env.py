"""launcher_free_env: a fresh MPI job started from inside a rank must not inherit the parent
job's launcher state, but must keep the user's MPI configuration."""
from distla.runtime import launcher_free_env


def test_launcher_state_dropped_user_configuration_kept():
    env = {
        # one job's state: Open MPI / ORTE, PMIx, MPICH Hydra, PMI
        "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2", "OMPI_UNIVERSE_SIZE": "2",
        "OMPI_MCA_orte_hnp_uri": "123.0;tcp://x", "OMPI_MCA_ess": "^singleton",
        "OMPI_MCA_pmix": "^s1", "OMPI_FILE_LOCATION": "/tmp/f", "OMPI_APP_CTX_NUM_PROCS": "2",
        "PMIX_RANK": "1", "PMIX_NAMESPACE": "ns", "PMI_RANK": "1", "PMI_FD": "5",
        "HYDRA_CONTROL_FD": "7", "MPI_LOCALNRANKS": "2",
        # the user's configuration and everything else
        "OMPI_MCA_plm": "isolated", "OMPI_MCA_plm_rsh_agent": "", "OMPI_MCA_btl": "^openib",
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PATH": "/usr/bin", "CUPY_CACHE_DIR": "/tmp/k", "MPIR_CVAR_CH4_CMA_ENABLE": "0",
    }
    out = launcher_free_env(env)
    assert set(out) == {"OMPI_MCA_plm", "OMPI_MCA_plm_rsh_agent", "OMPI_MCA_btl",
                        "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "PATH",
                        "CUPY_CACHE_DIR",
                        "MPIR_CVAR_CH4_CMA_ENABLE"}
    assert all(out[k] == env[k] for k in out)
    assert "PATH" in launcher_free_env()           # default: os.environ, not modified
