"""Real-world-shaped URLs and whether the publish gate may announce them (test data, no imports of ours).

Each row is (id, url, expected reason): "ok" means announceable; otherwise the reason the gate must give
(see proxy/url_privacy.py). The shapes follow each service's documentation or its documented example, with
account names, keys and signatures replaced by same-shaped stand-ins. `bench/attacks/privacy_gate.py` loads
this file by path, so it must stay importable on its own.

ISSUE_19 lists the exact parameter sets from GitHub issue 19 item 4 that were stored, announced and
published before the fix. KNOWN_MISSES are path-embedded tokens the gate cannot tell from content-addressed
paths; they document a limit, they are not expected to be refused.
"""

# JWTs as services send them: header.payload.signature, base64url without padding.
JWT_HS256 = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0Ij"
             "oxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
JWT_STREAM = ("eyJhbGciOiJSUzI1NiIsImtpZCI6ImNkYzkzNTk4MmY4MDc1ZjJlZjk2MTA2ZDg1ZmNkODM4In0.eyJzdWIiOiIwYjI4MTM1M"
              "Tk1YjdkMDY4ZGY0YzIwMzc3NzUzZDg5NyIsImtpZCI6ImNkYzkzNTk4MmY4MDc1ZjJlZjk2MTA2ZDg1ZmNkODM4IiwiZXhwIjoi"
              "MTYyNTgyMzk5MSIsIm5iZiI6IjE2MjU4MTY3OTEifQ.v1pTkK0a3AMRyoZgqkYSdQcQ0a1dmJ9u1DQm3FXYqD8")
JWT_GITHUB = ("eyJ0eXAiOiJKV1QiLCJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJnaXRodWIuY29tIiwiYXVkIjoicmVsZWFzZS1hc3NldHMuZ2l0"
              "aHVidXNlcmNvbnRlbnQuY29tIiwia2V5Ijoia2V5MSIsImV4cCI6MTc1MDQyMDgwMCwibmJmIjoxNzUwNDIwNTAwfQ.Fq3OZ0oz"
              "d5W5f-rP9mMKlB5V1Ug3mQm5qzV4zG3Qh8c")
SHA256_HEX = "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"

ISSUE_19 = [
    ("issue-nginx-md5-expires", "https://dl.example.com/f.iso?md5=&expires=", "signed-url"),
    ("issue-alibaba-auth-key", "https://dl.example.com/f.iso?auth_key=", "signed-url"),
    ("issue-oauth-code-state", "https://dl.example.com/f.iso?code=&state=", "signed-url"),
    ("issue-jwt", "https://dl.example.com/f.iso?jwt=", "signed-url"),
    ("issue-hmac", "https://dl.example.com/f.iso?hmac=", "signed-url"),
    ("issue-session", "https://dl.example.com/f.iso?session=", "signed-url"),
]

REFUSED = [
    # AWS S3 SigV2 query-string authentication (S3 docs: "Authenticating requests: query string")
    ("s3-sigv2", "https://examplebucket.s3.amazonaws.com/photos/puppy.jpg?AWSAccessKeyId=AKIAIOSFODNN7EXAMPLE"
                 "&Signature=NpgCjnDzrM%2BWFzoENXmpNDUsSn8%3D&Expires=1175139620", "signed-url"),
    # AWS S3 SigV4 presigned GET (S3 docs example)
    ("s3-sigv4", "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                 "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
                 "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
                 f"&X-Amz-Signature={SHA256_HEX}", "signed-url"),
    # AWS S3 SigV4 with STS temporary credentials, and a download file name override
    ("s3-sigv4-sts", "https://examplebucket.s3.us-west-2.amazonaws.com/build/app.zip"
                     "?response-content-disposition=attachment%3B%20filename%3Dapp.zip"
                     "&X-Amz-Security-Token=IQoJb3JpZ2luX2VjEJr%2F%2F%2F%2F%2F%2F%2F%2F%2F%2FwEaCXVzLWVhc3QtMSJHMEU"
                     "&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20240101T000000Z&X-Amz-SignedHeaders=host"
                     "&X-Amz-Expires=300&X-Amz-Credential=ASIAEXAMPLE%2F20240101%2Fus-west-2%2Fs3%2Faws4_request"
                     f"&X-Amz-Signature={SHA256_HEX}", "signed-url"),
    # AWS S3: only the session token left, e.g. a URL cut short in a log
    ("s3-security-token-alone", "https://b.s3.amazonaws.com/k?X-Amz-Security-Token=FwoGZXIvYXdzEJr", "signed-url"),
    # GitHub release asset redirect (Azure user-delegation SAS plus GitHub's own jwt)
    ("github-release-asset", "https://release-assets.githubusercontent.com/github-production-release-asset/"
                             "123456789/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0?sp=r&sv=2018-11-09&sr=b&spr=https"
                             "&se=2025-06-20T12%3A00%3A00Z&rscd=attachment%3B+filename%3Dtool-linux-amd64.tar.gz"
                             "&rsct=application%2Foctet-stream&skoid=96c2d410-5711-43a1-aedd-ab1947aa7ab0"
                             "&sktid=398a6654-997b-47e9-b12b-9515b896b4de&skt=2025-06-20T11%3A00%3A00Z"
                             "&ske=2025-06-20T12%3A00%3A00Z&sks=b&skv=2018-11-09"
                             "&sig=3kJmA%2FbW1xQ9Zr0pLk7s8YtUvWnC4dE5fG6hI7jK8lM%3D"
                             f"&jwt={JWT_GITHUB}&filename=tool-linux-amd64.tar.gz", "signed-url"),
    # Google Cloud Storage V2 signed URL (GCS docs)
    ("gcs-v2", "https://storage.googleapis.com/example-bucket/cat.jpeg"
               "?GoogleAccessId=example%40example-project.iam.gserviceaccount.com&Expires=1458238630"
               "&Signature=VVUgfqviDCov%2B%2BKnmVOkwBR12345%2Fabc%3D", "signed-url"),
    # Google Cloud Storage V4 signed URL, RSA key (GCS docs)
    ("gcs-v4", "https://storage.googleapis.com/example-bucket/cat.jpeg?X-Goog-Algorithm=GOOG4-RSA-SHA256"
               "&X-Goog-Credential=example%40example-project.iam.gserviceaccount.com%2F20181026%2Fus-central1"
               "%2Fstorage%2Fgoog4_request&X-Goog-Date=20181026T181309Z&X-Goog-Expires=900"
               f"&X-Goog-SignedHeaders=host&X-Goog-Signature={SHA256_HEX}", "signed-url"),
    # Google Cloud Storage V4 signed URL, HMAC key
    ("gcs-v4-hmac", "https://storage.googleapis.com/b/o.tar?x-goog-algorithm=GOOG4-HMAC-SHA256"
                    f"&x-goog-signature={SHA256_HEX}", "signed-url"),
    # Azure Blob service SAS (Azure docs example, with IP range)
    ("azure-service-sas", "https://myaccount.blob.core.windows.net/sascontainer/sasblob.txt?sv=2019-02-02"
                          "&st=2019-04-29T22%3A18%3A26Z&se=2019-04-30T02%3A23%3A26Z&sr=b&sp=rw"
                          "&sip=168.1.5.60-168.1.5.70&spr=https&sig=Z%2FRHIX5Xcg0Mq2rqI3OlWTjEg2tYkboXr1P9ZUXDtkk%3D",
     "signed-url"),
    # Azure account SAS
    ("azure-account-sas", "https://myaccount.blob.core.windows.net/c/b.bin?sv=2019-02-02&ss=bf&srt=s&sp=rl"
                          "&se=2030-04-30T02%3A23%3A26Z&sig=abcDEF123%2Fghi%3D", "signed-url"),
    # Azure SAS value alone (`sig=` pasted without the rest)
    ("azure-sig-alone", "https://a.blob.core.windows.net/c/b?sig=abc", "signed-url"),
    # CloudFront canned policy (CloudFront docs)
    ("cloudfront-canned", "https://d111111abcdef8.cloudfront.net/image.jpg?color=red&size=medium&Expires=1357034400"
                          "&Signature=nitfHRCrtziwO2HwPfWw~yYDhUF5EwRunQA-j19DzZrvDh6hQ73lDx~-ar3UocvvRQVw6EkC~Gd"
                          "pGQyyOSKQim-TxAnW7d8F5Kkai9HVx0FIu-5jcQb0UEmatEXAMPLE3ReXySpLSMj0yCd3ZAB4UcBCAq"
                          "&Key-Pair-Id=K2JCJMDEHXQW5F", "signed-url"),
    # CloudFront custom policy
    ("cloudfront-custom", "https://d111111abcdef8.cloudfront.net/game_download.zip?Policy=eyJTdGF0ZW1lbnQiOlt7IlJlc"
                          "291cmNlIjoiaHR0cDovL2QxMTExMTFhYmNkZWY4LmNsb3VkZnJvbnQubmV0L2dhbWVfZG93bmxvYWQuemlwIn1dfQ__"
                          "&Signature=abc~def-ghi&Key-Pair-Id=K2JCJMDEHXQW5F", "signed-url"),
    # Akamai token auth 2.0, query form
    ("akamai-hdnts", "https://example.akamaized.net/video/master.m3u8?hdnts=exp%3D1577836800~acl%3D%2Fvideo%2F%2A"
                     f"~hmac%3D{SHA256_HEX}", "signed-url"),
    ("akamai-token", "https://example.akamaized.net/dl/file.zip?__token__=st=1577836700~exp=1577836800~acl=/dl/*"
                     f"~hmac={SHA256_HEX}", "signed-url"),
    ("akamai-hdnea", f"https://example.akamaihd.net/i/v.mp4?hdnea=exp=1577836800~acl=/*~hmac={SHA256_HEX}",
     "signed-url"),
    # nginx secure_link (nginx docs example) and its `st`/`e` variant
    ("nginx-secure-link", "https://example.com/p/files/top_secret.pdf?md5=AUEnXC7T-Tfv9WLsWbf-mw&expires=2147483647",
     "signed-url"),
    ("nginx-secure-link-st-e", "https://example.com/dl/f.mp4?st=AUEnXC7T-Tfv9WLsWbf-mw&e=1700000000", "signed-url"),
    # Alibaba Cloud CDN URL signing type A (auth_key=timestamp-rand-uid-md5hash)
    ("alibaba-cdn-type-a", "https://cdn.example.com/video/standard/1K.html"
                           "?auth_key=1444435200-0-0-80cd3862d699b7118eed99103f2a3a4f", "signed-url"),
    # Alibaba Cloud OSS V1 and V4 presigned URLs, STS token
    ("alibaba-oss-v1", "https://examplebucket.oss-cn-hangzhou.aliyuncs.com/oss-api.pdf?OSSAccessKeyId=nz2pc56s936"
                       "&Expires=1141889120&Signature=vjbyPxybdZaNmGa%2ByT272YEAiv4%3D", "signed-url"),
    ("alibaba-oss-v4", "https://examplebucket.oss-cn-hangzhou.aliyuncs.com/x.bin?x-oss-signature-version="
                       "OSS4-HMAC-SHA256&x-oss-credential=LTAI%2F20231203%2Fcn-hangzhou%2Foss%2Faliyun_v4_request"
                       f"&x-oss-date=20231203T121212Z&x-oss-expires=86400&x-oss-signature={SHA256_HEX}",
     "signed-url"),
    ("alibaba-oss-sts", "https://b.oss-cn-beijing.aliyuncs.com/o?security-token=CAIS8wF1q6Ft5B2yfSjIr5b", "signed-url"),
    # Tencent Cloud CDN auth type A (sign=timestamp-rand-uid-md5) and type D (sign=md5&t=hex time)
    ("tencent-cdn-type-a", "https://www.example.com/foo.jpg?sign=1563541200-29faf2a8be834e96-0-5c2d7a0da6c2d0a24a3e8e",
     "signed-url"),
    ("tencent-cdn-type-d", "https://www.example.com/foo.jpg?sign=75f7d8e5fd3d6a5a8a8e7b27a7f8e9fc&t=5e7b1c2d",
     "signed-url"),
    # Tencent Cloud VOD key hotlink protection (t, exper, rlimit, us, sign)
    ("tencent-vod-key", "https://example.vod2.myqcloud.com/dir1/dir2/myVideo.mp4?t=5c271c40&exper=0&rlimit=3"
                        "&us=72d4cd1101&sign=9e8ea8d2ad8fe6a7b6b2a1b85efea88b", "signed-url"),
    # Tencent Cloud COS presigned URL (q-sign-* family)
    ("tencent-cos", "https://examplebucket-1250000000.cos.ap-beijing.myqcloud.com/exampleobject?q-sign-algorithm=sha1"
                    "&q-ak=AKIDQjz3ltompVjBni5LitkWHFlFpwkn9U5q&q-sign-time=1417773892;1417853898"
                    "&q-key-time=1417773892;1417853898&q-header-list=host&q-url-param-list="
                    "&q-signature=da39a3ee5e6b4b0d3255bfef95601890afd80709", "signed-url"),
    # Qiniu private download URL (e=deadline, token=AK:base64 HMAC)
    ("qiniu-private", "http://78re52.com1.z0.glb.clouddn.com/resource/flower.jpg?e=1451491200"
                      "&token=MY_ACCESS_KEY:yN9WtB0lQheegAwva64yBuH3ZgU=", "signed-url"),
    # Fastly token authentication (token=expiry_signature)
    ("fastly-token", "https://www.example.com/video.mp4?token=1700000000_b1c3d5e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9",
     "signed-url"),
    # BunnyCDN token authentication: query form, and the path form that signs a directory
    ("bunny-query", "https://myzone.b-cdn.net/videos/video.mp4?token=4vA3fT9u-3hQm8xZ0yB1cE2dF3gH4iJ5kL6m"
                    "&expires=1598024587", "signed-url"),
    ("bunny-path", "https://myzone.b-cdn.net/bcdn_token=HS1wmhXh5XWqy3S-Xl8k6e1l8dKs&expires=1598024587"
                   "&token_path=%2Fvideos%2F/videos/video.mp4", "signed-url"),
    # Cloudflare Workers HMAC-signed URL (verify=expiry-base64mac)
    ("cloudflare-verify", "https://example.com/files/report.pdf?verify=1700000000-Mx7i8aXr%2BgGHb8Z8p9%2Fq1bV0qZ9y",
     "signed-url"),
    # Cloudflare Stream signed URL: the JWT is a path segment
    ("cloudflare-stream", f"https://customer-f33zs165nr7gyfy4.cloudflarestream.com/{JWT_STREAM}/manifest/video.m3u8",
     "secret-value"),
    # Wowza SecureToken
    ("wowza-securetoken", "https://wowza.example.com/vod/mp4:sample.mp4/playlist.m3u8?wowzatokenendtime=1700000000"
                          "&wowzatokenhash=P2fO6QbGmEJqn3yz8rYkTA", "signed-url"),
    # OAuth 2.0 authorization code redirect (RFC 6749 §4.1.2) and OIDC session_state
    ("oauth-code", "https://client.example.com/cb?code=SplxlOBeZQQYbYS6WxSbIA&state=xyz", "signed-url"),
    ("oidc-code", "https://app.example.com/signin-oidc?code=4%2F0AX4XfWh&state=af0ifjsldkj&session_state=abc.def",
     "signed-url"),
    # OAuth 2.0 implicit grant: the token is in the fragment (RFC 6749 §4.2.2)
    ("oauth-implicit", "https://client.example.com/cb#access_token=2YotnFZFEjr1zCsicMWpAA&state=xyz"
                       "&token_type=example&expires_in=3600", "signed-url"),
    # OAuth bearer in the query (RFC 6750 §2.3, Google's ya29. tokens), OIDC id_token, OAuth 1.0a
    ("oauth-access-token", "https://www.googleapis.com/drive/v3/files/1x?alt=media&access_token=ya29.a0AfH6SMBx",
     "signed-url"),
    ("oidc-id-token", f"https://app.example.com/export.csv?id_token={JWT_HS256}", "signed-url"),
    ("oauth1", "https://api.example.com/file.zip?oauth_consumer_key=dpf43f3p2l4k3l03&oauth_token=nnch734d00sl2jdk"
               "&oauth_signature_method=HMAC-SHA1&oauth_timestamp=1191242096&oauth_nonce=kllo9940pd9333jh"
               "&oauth_signature=tR3%2BTy81lMeYAr%2FFid0kMTYa%2FWM%3D", "signed-url"),
    # SAML POST binding as a redirect, CAS service ticket
    ("saml", "https://sp.example.com/acs?SAMLResponse=PHNhbWxwOlJlc3BvbnNl&RelayState=token", "signed-url"),
    ("cas-ticket", "https://app.example.com/report.pdf?ticket=ST-1856339-aA5Yuvrxzpv8Tau1cYQ7", "signed-url"),
    # JWT value under a name that says nothing
    ("jwt-any-name", f"https://dl.example.com/f.zip?data={JWT_HS256}", "secret-value"),
    # high-entropy values under names that say nothing: SHA-256 hex, base64, base62, a UUID, a short hex id
    ("hex-any-name", f"https://dl.example.com/f.zip?x={SHA256_HEX}", "secret-value"),
    ("base64-any-name", "https://dl.example.com/f.zip?file=ZGVhZGJlZWZjYWZlYmFiZTAxMjM0NTY3ODk", "secret-value"),
    ("base62-any-name", "https://dl.example.com/f.zip?r=AbCdEfGh1jKlMnOp2qRs", "secret-value"),
    ("uuid-any-name", "https://dl.example.com/f.zip?id=550e8400-e29b-41d4-a716-446655440000", "secret-value"),
    ("short-hex-any-name", "https://dl.example.com/f.zip?rev=3f2a9c1d", "secret-value"),
    # Google Drive direct download: the file id is the link-sharing capability
    ("google-drive", "https://drive.google.com/uc?export=download&id=1A2b3C4d5E6f7G8h9I0jKlMnOpQrStUvW",
     "secret-value"),
    # Dropbox new shared links: rlkey is the capability
    ("dropbox-rlkey", "https://www.dropbox.com/scl/fi/abc/file.zip?rlkey=3x9v1q7z2k8w0m4n6p5r3t1yb&dl=1",
     "secret-value"),
    # S3 version id (opaque, 32+ chars)
    ("s3-version-id", "https://b.s3.amazonaws.com/k.tar?versionId=3HL4kqtJlcpXroDTDmJ%2BrmSpXd3dIbrHY%2BMTRCxf3vjV",
     "secret-value"),
    # sessions: query, Java path parameter, PHP, ColdFusion, ASP.NET cookieless path
    ("sid", "https://forum.example.com/download/file.php?id=42&sid=9f8e7d6c5b4a39281706f5e4d3c2b1a0", "signed-url"),
    ("phpsessid", "https://shop.example.com/dl.php?file=manual.pdf&PHPSESSID=el4ukv0kqbvoirg7nkp4dncpk3",
     "signed-url"),
    ("jsessionid-path", "https://portal.example.com/app;jsessionid=A1B2C3D4E5F6A7B8C9D0E1F2A3B4C5D6/download.zip",
     "signed-url"),
    ("jsessionid-upper", "https://portal.example.com/dl/report.pdf;JSESSIONID=A1B2C3D4E5F6", "signed-url"),
    ("coldfusion", "https://www.example.com/get.cfm?file=a.pdf&CFID=12345&CFTOKEN=87654321", "signed-url"),
    ("aspnet-cookieless", "https://www.example.com/(S(lit3py55t21z5v55vlm25s55))/files/a.zip", "signed-url"),
    # API keys: Google, generic, header-style name, Azure APIM, GitLab private token
    ("google-api-key", "https://www.googleapis.com/storage/v1/b/x/o/y?alt=media&key=AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jk",
     "signed-url"),
    ("api-key", "https://api.example.com/v1/export.csv?api_key=abc", "signed-url"),
    ("apikey", "https://api.example.com/v1/export.csv?apikey=abc", "signed-url"),
    ("x-api-key", "https://api.example.com/v1/export.csv?X-API-Key=abc", "signed-url"),
    ("subscription-key", "https://apim.example.net/files/a.zip?subscription-key=0123abcd", "signed-url"),
    ("gitlab-private-token", "https://gitlab.example.com/api/v4/projects/1/packages/generic/p/1.0/f.bin"
                             "?private_token=glpat-xxxxxxxxxxxxxxxxxxxx", "signed-url"),
    ("client-secret", "https://api.example.com/a.zip?client_id=abc&client_secret=def", "signed-url"),
    # generic credential names, values short enough to look harmless on their own
    ("signature", "https://dl.example.com/f.zip?signature=abc", "signed-url"),
    ("hash", "https://dl.example.com/f.zip?hash=abc", "signed-url"),
    ("digest", "https://dl.example.com/f.zip?digest=abc", "signed-url"),
    ("nonce", "https://dl.example.com/f.zip?nonce=abc", "signed-url"),
    ("otp", "https://dl.example.com/f.zip?otp=123456", "signed-url"),
    ("password", "https://dl.example.com/f.zip?password=hunter2", "signed-url"),
    ("pwd", "https://dl.example.com/f.zip?pwd=hunter2", "signed-url"),
    ("passwd", "https://dl.example.com/f.zip?passwd=hunter2", "signed-url"),
    ("secret", "https://dl.example.com/f.zip?secret=abc", "signed-url"),
    ("auth", "https://dl.example.com/f.zip?auth=abc", "signed-url"),
    ("credential", "https://dl.example.com/f.zip?credential=abc", "signed-url"),
    ("authenticity-token", "https://dl.example.com/f.zip?authenticity_token=abc", "signed-url"),
    ("user-email", "https://dl.example.com/f.zip?email=alice", "signed-url"),
    # expiries and timestamps by name, with values that could pass on their own
    ("expires-alone", "https://example.org/a?expires=3600", "signed-url"),
    ("exp", "https://example.org/a?exp=3600", "signed-url"),
    ("sourceforge-ts", "https://downloads.sourceforge.net/project/foo/foo-1.0.tar.gz?r=&ts=1700000000"
                       "&use_mirror=netix", "signed-url"),
    # timestamps and dates by value: jQuery's cache buster, an ISO date-time
    ("jquery-cache-buster", "https://example.com/data.json?_=1700000000000", "secret-value"),
    ("iso-datetime", "https://example.com/a.zip?at=2030-01-01T00%3A00%3A00Z", "secret-value"),
    # JetBrains product code: an innocent `code`, refused as OAuth's is (a false positive we accept)
    ("jetbrains-code", "https://data.services.jetbrains.com/products/download?code=IIC&platform=linux", "signed-url"),
    # values that do not decode or hide another URL
    ("non-utf8-escape", "https://example.com/a?name=%ff%fe", "secret-value"),
    ("double-encoded-name", "https://example.com/a?%2573ig=abc", "secret-value"),
    ("nested-signed-url", "https://example.com/redirect?to=https%3A%2F%2Fb.s3.amazonaws.com%2Fk%3FSignature%3Dx",
     "secret-value"),
    ("semicolon-separated", "https://example.org/a?v=1;sig=x", "signed-url"),
    ("encoded-name", "https://example.org/a?%73ig=x", "signed-url"),
    # credentials before the host: basic auth, a git token as user name
    ("userinfo-password", "https://alice:secret@example.org/a.iso", "userinfo"),
    ("userinfo-token", "https://ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com/o/r/archive/main.zip", "userinfo"),
    # does not parse, or is not http
    ("bad-ipv6", "http://[::1/a", "url"),
    ("bad-port", "http://example.org:99999/a", "url"),
    ("raw-space", "https://example.org/a b.iso", "url"),
    ("raw-unicode", "https://example.org/ä.iso", "url"),
    ("ftp", "ftp://ftp.example.org/pub/a.iso", "scheme"),
]

ALLOWED = [
    ("plain-file", "https://example.com/file.iso", "ok"),
    ("version", "https://example.com/file.iso?version=1.2.3", "ok"),
    ("v", "https://example.com/app.js?v=3", "ok"),
    ("download-flag", "https://example.com/file.iso?download=1", "ok"),
    ("lang", "https://example.com/file.iso?lang=en", "ok"),
    ("platform-arch", "https://example.com/get?platform=linux&arch=x64", "ok"),
    # GitHub blob with raw=true
    ("github-raw", "https://github.com/owner/repo/blob/main/dist/tool.bin?raw=true", "ok"),
    # GitHub source archive and codeload
    ("github-archive", "https://github.com/owner/repo/archive/refs/tags/v1.2.3.tar.gz", "ok"),
    ("github-codeload", "https://codeload.github.com/owner/repo/tar.gz/refs/heads/main", "ok"),
    # SourceForge project download page with mirror choice (no timestamp)
    ("sourceforge", "https://sourceforge.net/projects/foo/files/foo-1.0.tar.gz/download?use_mirror=netix", "ok"),
    # Mozilla's download redirector
    ("mozilla", "https://download.mozilla.org/?product=firefox-latest-ssl&os=linux64&lang=en-US", "ok"),
    # VS Code
    ("vscode", "https://code.visualstudio.com/sha/download?build=stable&os=linux-deb-x64", "ok"),
    # Microsoft fwlink
    ("fwlink", "https://go.microsoft.com/fwlink/?linkid=2088631", "ok"),
    # python.org, nodejs.org, go.dev, Ubuntu, Debian, Chrome, Maven Central
    ("python", "https://www.python.org/ftp/python/3.12.0/Python-3.12.0.tgz", "ok"),
    ("node", "https://nodejs.org/dist/v20.10.0/node-v20.10.0-linux-x64.tar.xz", "ok"),
    ("go", "https://go.dev/dl/go1.21.5.linux-amd64.tar.gz", "ok"),
    ("ubuntu", "https://releases.ubuntu.com/22.04/ubuntu-22.04.3-desktop-amd64.iso", "ok"),
    ("debian", "http://deb.debian.org/debian/pool/main/c/curl/curl_7.88.1-10_amd64.deb", "ok"),
    ("chrome", "https://dl.google.com/linux/direct/google-chrome-stable_current_amd64.deb", "ok"),
    ("maven", "https://repo1.maven.org/maven2/org/apache/commons/commons-lang3/3.14.0/commons-lang3-3.14.0.jar",
     "ok"),
    # PyPI and npm: content-addressed or scoped paths
    ("pypi", "https://files.pythonhosted.org/packages/70/8e/"
             "0e2d847013cb52cd35b38c009bb167a1a26b2ce6cd6965bf26b47bc0bf44/requests-2.31.0-py3-none-any.whl", "ok"),
    ("npm-scoped", "https://registry.npmjs.org/@scope/pkg/-/pkg-1.2.3.tgz", "ok"),
    # Docker registry blob by digest
    ("docker-blob", f"https://registry.example.com/v2/library/alpine/blobs/sha256:{SHA256_HEX}", "ok"),
    # GitLab raw file, generic download script, Dropbox old-style link, small ids and date-like versions
    ("gitlab-raw", "https://gitlab.com/group/project/-/raw/main/file.bin?inline=false", "ok"),
    ("download-php", "https://example.com/download.php?file=report-2023.pdf", "ok"),
    ("dropbox-dl", "https://www.dropbox.com/s/abc/file.zip?dl=1", "ok"),
    ("small-id", "https://example.com/get?id=12345", "ok"),
    ("compact-date-version", "https://example.com/app.css?v=20240115", "ok"),
    ("format-ref", "https://example.com/archive?format=zip&ref=main", "ok"),
    ("search-words", "https://example.com/find?q=ubuntu+22.04", "ok"),
    ("php-array", "https://example.com/get?arch[]=x64&arch[]=arm64", "ok"),
    ("camel-names", "https://example.com/get?productVersion=2.1&osName=macOS", "ok"),
    ("words-not-keys", "https://example.org/a?keyboard=us&monkey=1", "ok"),
    ("token-as-value", "https://example.org/a?name=token", "ok"),
    ("ipv6-host", "https://[2001:db8::1]:8443/file.iso", "ok"),
    ("port", "http://example.com:8080/file.iso", "ok"),
    ("at-in-path", "https://example.org/@scope/pkg", "ok"),
    ("upper-scheme", "HTTPS://Example.COM/File.ISO", "ok"),
]

CORPUS = ISSUE_19 + REFUSED + ALLOWED

# Tokens in the path proper: the gate lets them through (see proxy/url_privacy.py for why).
KNOWN_MISSES = [
    # Alibaba Cloud CDN URL signing types B and C
    ("alibaba-cdn-type-b", "https://cdn.example.com/201508301005/9b61a1d2e2d8e09c4e0de8d6c9d4c5e8/video/1K.html"),
    ("alibaba-cdn-type-c", "https://cdn.example.com/9b61a1d2e2d8e09c4e0de8d6c9d4c5e8/55CE8100/video/1K.html"),
    # Tencent Cloud CDN auth type B
    ("tencent-cdn-type-b", "https://www.example.com/201907190000/29faf2a8be834e96b80b5e6b9bbb4f1f/foo.jpg"),
    # Dropbox old-style shared link: the id is the capability
    ("dropbox-path-id", "https://www.dropbox.com/s/q8z2x1v7n3m5k9j/file.zip?dl=1"),
]
