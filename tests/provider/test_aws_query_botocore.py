"""The EC2 request bodies spotlab builds (aws_query) against botocore's.

aws-query-dump prints the body of each request of aws-query-cases.h;
botocore's EC2 serializer builds the same requests from the parameters
below, and its wire form (percent_encode_sequence) must hold exactly the
same name=value pairs. Order differs (EC2 reads pairs by name), encoding may
not: each pair is compared byte for byte.

Usage: test_aws_query_botocore.py AWS_QUERY_DUMP
"""

import base64
import datetime
import subprocess
import sys

from botocore import serialize, session
from botocore.utils import percent_encode_sequence

T = datetime.datetime(2026, 11, 24, 5, 18, 22, tzinfo=datetime.timezone.utc)
IDS = ["i-0a1b2c3d4e5f60718", "i-0b2c3d4e5f6071829"]
TYPES = ["g5.xlarge", "g4dn.xlarge", "p3.2xlarge"]
LIVE = ["pending", "running", "shutting-down", "stopping", "stopped"]
USER_DATA = "#!/bin/sh\nexec spotlab-worker --boot /run/spotlab/boot.json\n"
AL2023 = "resolve:ssm:/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-x86_64"
SHUTDOWN = {"InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {"HttpTokens": "required"}}


def spot(max_price=None):
    opts = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
    if max_price:
        opts["MaxPrice"] = max_price
    return {"MarketType": "spot", "SpotOptions": opts}


CASES = {
    "run-full": ("RunInstances", dict(
        ImageId="resolve:ssm:/aws/service/deeplearning/ami/x86_64/"
                "base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id",
        InstanceType="g5.xlarge", MinCount=1, MaxCount=1, ClientToken="J000042-a3-7f3e",
        Placement={"AvailabilityZone": "us-east-1b"}, SubnetId="subnet-0123456789abcdef0",
        SecurityGroupIds=["sg-0123456789abcdef0", "sg-0fedcba9876543210"],
        IamInstanceProfile={"Name": "spotlab-worker"}, KeyName="ops key",
        InstanceMarketOptions=spot("0.500000"),
        TagSpecifications=[{"ResourceType": "instance", "Tags": [
            {"Key": "spotlab:gateway", "Value": "gw-5e6f7a8b"},
            {"Key": "spotlab:instance", "Value": "aws-0042-3"},
            {"Key": "spotlab:job", "Value": "42"},
            {"Key": "owner name", "Value": "Zo\u00eb & co/+=~%*'()!"}]}],
        UserData=base64.b64encode(USER_DATA.encode()).decode(), **SHUTDOWN)),
    "run-small": ("RunInstances", dict(
        ImageId="ami-0c1d2e3f4a5b6c7d8", InstanceType="t3.micro", MinCount=1, MaxCount=1,
        IamInstanceProfile={"Arn": "arn:aws:iam::111122223333:instance-profile/spotlab-worker"},
        DryRun=True, **SHUTDOWN)),
    "terminate": ("TerminateInstances", dict(InstanceIds=IDS)),
    "describe-tag": ("DescribeInstances", dict(
        Filters=[{"Name": "tag:spotlab:gateway", "Values": ["gw-5e6f7a8b"]},
                 {"Name": "instance-state-name", "Values": LIVE}],
        MaxResults=200, NextToken="page/2+=")),
    "describe-key": ("DescribeInstances", dict(
        Filters=[{"Name": "tag-key", "Values": ["spotlab:gateway"]},
                 {"Name": "instance-state-name", "Values": LIVE}],
        MaxResults=200)),
    "describe-ids": ("DescribeInstances", dict(InstanceIds=IDS)),
    "spot-prices": ("DescribeSpotPriceHistory", dict(
        InstanceTypes=TYPES[:2], ProductDescriptions=["Linux/UNIX"], StartTime=T, EndTime=T,
        MaxResults=1000)),
    "scores": ("GetSpotPlacementScores", dict(
        InstanceTypes=TYPES, TargetCapacity=2, TargetCapacityUnitType="units",
        SingleAvailabilityZone=True, RegionNames=["us-east-1"], MaxResults=10)),
    "dry-RunInstances": ("RunInstances", dict(
        ImageId=AL2023, InstanceType="t3.micro", MinCount=1, MaxCount=1, DryRun=True,
        **SHUTDOWN)),
    "dry-TerminateInstances": ("TerminateInstances", dict(
        InstanceIds=["i-00000000000000000"], DryRun=True)),
    "dry-DescribeInstances": ("DescribeInstances", dict(
        Filters=[{"Name": "instance-state-name", "Values": LIVE}], MaxResults=200, DryRun=True)),
    "dry-CreateTags": ("CreateTags", dict(
        Resources=["i-00000000000000000"], Tags=[{"Key": "spotlab:check", "Value": "dry-run"}],
        DryRun=True)),
    "dry-DescribeSpotPriceHistory": ("DescribeSpotPriceHistory", dict(
        InstanceTypes=["t3.micro"], ProductDescriptions=["Linux/UNIX"], StartTime=T, EndTime=T,
        MaxResults=1000, DryRun=True)),
    "dry-GetSpotPlacementScores": ("GetSpotPlacementScores", dict(
        InstanceTypes=["t3.micro", "t3.small", "t3.medium"], TargetCapacity=1,
        TargetCapacityUnitType="units", SingleAvailabilityZone=True, RegionNames=["us-east-1"],
        MaxResults=10, DryRun=True)),
}


def main():
    out = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
    built = dict(line.split(" ", 1) for line in out.splitlines())
    model = session.get_session().get_service_model("ec2")
    ser = serialize.create_serializer("ec2", include_validation=True)
    failures = 0
    if set(built) != set(CASES):
        print("cases differ:", sorted(set(built) ^ set(CASES)))
        failures += 1
    for name, (action, params) in CASES.items():
        if name not in built:
            continue
        req = ser.serialize_to_request(params, model.operation_model(action))
        want = sorted(percent_encode_sequence(req["body"]).split("&"))
        got = sorted(built[name].split("&"))
        if got != want:
            failures += 1
            print(f"{name}: only spotlab's: {sorted(set(got) - set(want))}")
            print(f"{name}: only botocore's: {sorted(set(want) - set(got))}")
        else:
            print(f"{name}: {len(got)} pairs agree")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
