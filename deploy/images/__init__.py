"""Local stand-in images for the compose stack, and the Docker engine the tests start.

``python -m deploy.images build`` (``make images``) builds them from Debian's
packages, cached by content; ``docker-compose.local.yml`` names them. ``python
-m deploy.images run -- CMD`` (``make test``) makes sure an engine answers
(installing and starting Debian's ``docker.io`` where none does), builds the
images, runs ``CMD``, and stops the engine again if it started it.
"""
from deploy.images.build import EXPORTER_IMAGE, IMAGES, Image, build_images, content_hash

__all__ = ["Image", "IMAGES", "EXPORTER_IMAGE", "build_images", "content_hash"]
