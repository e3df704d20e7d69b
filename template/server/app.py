from harbor_openenv import build_app
app = build_app()
