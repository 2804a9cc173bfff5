"""The boto3 half of the seed capture (capture.sh): every S3 call the server and client
parsers see, over HTTP (argv[1]) and over HTTPS (argv[2], CA file argv[3]), where botocore
switches to aws-chunked uploads with checksum trailers. Each phase writes its label to
TAG (argv[4]) so the recording proxy names the connection after it."""
import boto3, botocore, io, sys
from botocore.config import Config
ep, tls_ep, ca, tag_file = sys.argv[1:5]
def tag(t): open(tag_file, "w").write(t)
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="ferry", aws_secret_access_key="ferry-secret",
                  region_name="us-east-1", config=Config(retries={"max_attempts": 1}))
tag("boto3")
try: s3.create_bucket(Bucket="fuzz")
except Exception as e: print(e)
s3.put_object(Bucket="fuzz", Key="dir/a.txt", Body=b"hello, fuzz\n" * 20)
s3.put_object(Bucket="fuzz", Key="dir/sub/b.bin", Body=bytes(range(256)), ChecksumAlgorithm="SHA256")
s3.put_object(Bucket="fuzz", Key="caf\u00e9 key+&=?.txt", Body=b"x")
s3.get_object(Bucket="fuzz", Key="dir/a.txt", Range="bytes=5-20")["Body"].read()
s3.get_object(Bucket="fuzz", Key="dir/a.txt", Range="bytes=-7")["Body"].read()
s3.head_object(Bucket="fuzz", Key="dir/sub/b.bin", ChecksumMode="ENABLED")
s3.list_objects_v2(Bucket="fuzz", Prefix="dir/", Delimiter="/")
s3.list_objects_v2(Bucket="fuzz", MaxKeys=1, EncodingType="url")
s3.list_objects(Bucket="fuzz", Marker="a")
s3.list_buckets()
try: s3.get_object(Bucket="fuzz", Key="missing")
except botocore.exceptions.ClientError as e: print(e)
try: s3.get_object(Bucket="fuzz", Key="dir/a.txt", Range="bytes=9999-")
except botocore.exceptions.ClientError as e: print(e)
tag("boto3-mpu")
up = s3.create_multipart_upload(Bucket="fuzz", Key="mpu.bin", ChecksumAlgorithm="CRC32")
p = s3.upload_part(Bucket="fuzz", Key="mpu.bin", UploadId=up["UploadId"], PartNumber=1, Body=b"part one " * 30, ChecksumAlgorithm="CRC32")
s3.list_parts(Bucket="fuzz", Key="mpu.bin", UploadId=up["UploadId"])
s3.list_multipart_uploads(Bucket="fuzz")
s3.complete_multipart_upload(Bucket="fuzz", Key="mpu.bin", UploadId=up["UploadId"],
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"], "ChecksumCRC32": p["ChecksumCRC32"]}]})
up = s3.create_multipart_upload(Bucket="fuzz", Key="aborted.bin")
s3.abort_multipart_upload(Bucket="fuzz", Key="aborted.bin", UploadId=up["UploadId"])
tag("boto3-copy")
s3.copy_object(Bucket="fuzz", Key="copy.txt", CopySource={"Bucket": "fuzz", "Key": "dir/a.txt"})
s3.delete_objects(Bucket="fuzz", Delete={"Objects": [{"Key": "copy.txt"}, {"Key": "nothing"}], "Quiet": False})
s3.delete_object(Bucket="fuzz", Key="mpu.bin")
tag("boto3-stream")
def gen():
    yield b"streamed "
    yield b"body"
class NoSeek(io.RawIOBase):
    def __init__(self): self.d = io.BytesIO(b"unseekable body " * 10)
    def readable(self): return True
    def readinto(self, b):
        n = self.d.readinto(b); return n
s3.upload_fileobj(NoSeek(), "fuzz", "stream.bin")
tag("boto3-presign")
import urllib.request
url = s3.generate_presigned_url("get_object", Params={"Bucket": "fuzz", "Key": "dir/a.txt"}, ExpiresIn=300)
tag("boto3-presign-v2")
try: urllib.request.urlopen(url).read()
except Exception as e: print("v2 presign refused:", e)
tag("boto3-presign-v4")
s3v4 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="ferry", aws_secret_access_key="ferry-secret",
                  region_name="us-east-1", config=Config(signature_version="s3v4"))
urllib.request.urlopen(s3v4.generate_presigned_url("get_object", Params={"Bucket": "fuzz", "Key": "dir/a.txt"}, ExpiresIn=300)).read()

ep = tls_ep
s3 = boto3.client("s3", endpoint_url=ep, aws_access_key_id="ferry", aws_secret_access_key="ferry-secret",
                  region_name="us-east-1", verify=ca)
tag("boto3-tls-put")
s3.put_object(Bucket="fuzz", Key="tls/a.txt", Body=b"over tls, aws-chunked with a trailer\n" * 3)
tag("boto3-tls-put-sha256")
s3.put_object(Bucket="fuzz", Key="tls/b.txt", Body=b"sha256 trailer " * 5, ChecksumAlgorithm="SHA256")
tag("boto3-tls-mpu")
up = s3.create_multipart_upload(Bucket="fuzz", Key="tls/mpu.bin", ChecksumAlgorithm="CRC32")
p = s3.upload_part(Bucket="fuzz", Key="tls/mpu.bin", UploadId=up["UploadId"], PartNumber=1, Body=b"tls part " * 40, ChecksumAlgorithm="CRC32")
s3.complete_multipart_upload(Bucket="fuzz", Key="tls/mpu.bin", UploadId=up["UploadId"],
    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": p["ETag"], "ChecksumCRC32": p["ChecksumCRC32"]}]})
tag("boto3-tls-stream")
class NoSeekTls(io.RawIOBase):
    def __init__(self): self.d = io.BytesIO(b"unseekable over tls " * 8)
    def readable(self): return True
    def readinto(self, b): return self.d.readinto(b)
s3.upload_fileobj(NoSeekTls(), "fuzz", "tls/stream.bin")
