"""The local development stack: ``manage.py runstack`` (what ``make run`` ends with) starts the
web server, Celery worker and beat and a simulated fleet as child processes, with the demo
deployments, and with ``PITWALL_REAL_VLLM=1`` one more host serving a real vLLM
(real_vllm_demo.py). It assembles the other apps, like controlplane/asgi.py; none imports it."""
