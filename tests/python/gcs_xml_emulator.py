"""gcp-storage-emulator with the two parts of GCS's XML API it lacks, which
object_store's GCS client (and so Nereid) uses: listing a bucket
(`GET /BUCKET?list-type=2`, answered as GCS's XML API answers it:
https://cloud.google.com/storage/docs/xml-api/get-bucket-list) and the `ETag` /
`Last-Modified` headers on an object download
(https://cloud.google.com/storage/docs/xml-api/get-object-download). Everything
else — buckets, uploads, downloads, deletes — is the emulator's own.

Usage: python gcs_xml_emulator.py HOST PORT
"""

import sys
from datetime import datetime
from email.utils import format_datetime
from http import HTTPStatus
from xml.sax.saxutils import escape

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects


def _updated(obj):
    return datetime.strptime(obj["updated"], "%Y-%m-%dT%H:%M:%S.%f%z")


def _etag(obj):
    # GCS's XML API quotes the MD5 as hex; the emulator keeps it as base64 —
    # either is an opaque tag to a client.
    return f'"{obj.get("etag") or obj.get("md5Hash") or obj["generation"]}"'


def list_bucket(request, response, storage, *args, **kwargs):
    """ListObjectsV2 as GCS's XML API answers it, in one page."""
    bucket = request.params["bucket_name"]
    if request.query.get("list-type", [""])[0] != "2":
        response.status = HTTPStatus.NOT_IMPLEMENTED
        return
    prefix = request.query.get("prefix", [None])[0]
    delimiter = request.query.get("delimiter", [None])[0]
    try:
        files, prefixes = storage.get_file_list(bucket, prefix, delimiter)
    except NotFound:
        response.status = HTTPStatus.NOT_FOUND
        response.write_file(b"<Error><Code>NoSuchBucket</Code></Error>", "application/xml")
        return
    parts = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<ListBucketResult xmlns="http://doc.s3.amazonaws.com/2006-03-01">',
             f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix or '')}</Prefix>",
             f"<KeyCount>{len(files)}</KeyCount><IsTruncated>false</IsTruncated>"]
    for obj in files:
        modified = _updated(obj).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        parts.append(f"<Contents><Key>{escape(obj['name'])}</Key><Generation>{obj['generation']}</Generation>"
                     f"<LastModified>{modified}</LastModified><ETag>{escape(_etag(obj))}</ETag>"
                     f"<Size>{obj['size']}</Size></Contents>")
    for common in prefixes:
        parts.append(f"<CommonPrefixes><Prefix>{escape(common)}</Prefix></CommonPrefixes>")
    parts.append("</ListBucketResult>")
    response.write_file("".join(parts).encode(), "application/xml")


def download_with_headers(request, response, storage, *args, **kwargs):
    """The emulator's download, plus the validators the XML API sends."""
    objects.download(request, response, storage, *args, **kwargs)
    if response.status in (HTTPStatus.OK, HTTPStatus.PARTIAL_CONTENT):
        obj = storage.get_file_obj(request.params["bucket_name"], request.params["object_id"])
        response["ETag"] = _etag(obj)
        response["Last-Modified"] = format_datetime(_updated(obj), usegmt=True)


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    xml_routes = (
        (r"^/(?P<bucket_name>[-.\w]+)$", {server.GET: list_bucket}),
    )
    # The router reads HANDLERS on every request: the bucket listing goes first, and
    # the public object path (`/BUCKET/OBJECT`) gains the validators.
    server.HANDLERS = xml_routes + tuple(
        (regex, {**handlers, server.GET: download_with_headers}) if handlers.get(server.GET) is objects.download
        else (regex, handlers)
        for regex, handlers in server.HANDLERS)
    server.create_server(host, port, in_memory=True).run()


if __name__ == "__main__":
    main()
