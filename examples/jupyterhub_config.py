# An example hub configuration for FractionalSpawner: check it with
#   fracnb-dry-run examples/jupyterhub_config.py
c = get_config()  # noqa: F821 - provided by JupyterHub's config loader

c.JupyterHub.spawner_class = "fractional"
c.FractionalSpawner.gpu_backend = "time-slicing"
c.FractionalSpawner.gpu_memory = "80Gi"
c.FractionalSpawner.profile_list = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "0.25 GPU", "slug": "quarter", "gpu": {"fraction": 0.25}},
    {
        "display_name": "Shared GPU",
        "slug": "shared",
        "profile_options": {
            "size": {
                "display_name": "Size",
                "choices": {
                    "eighth": {"display_name": "1/8 GPU", "gpu": {"fraction": "1/8"}},
                    "half": {"display_name": "1/2 GPU", "gpu": {"fraction": 0.5, "backend": "hami"}},
                },
            }
        },
    },
    {"display_name": "MIG 1g.10gb", "slug": "mig-small", "gpu": {"backend": "mig", "mig_profile": "1g.10gb"}},
    {"display_name": "0.5 GPU, MPS", "slug": "mps-half", "gpu": {"fraction": 0.5, "backend": "mps"}},
    {"display_name": "0.25 GPU, KAI", "slug": "kai-quarter", "gpu": {"fraction": 0.25, "backend": "kai"}},
    {"display_name": "0.25 GPU, DRA slice", "slug": "dra-quarter", "gpu": {"fraction": 0.25, "backend": "dra"}},
    {"display_name": "1 GPU", "slug": "full", "gpu": {"count": 1}},
]
