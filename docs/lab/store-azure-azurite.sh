#!/usr/bin/env bash
# ferry vs rclone against one Azurite (in memory), side by side, 3 runs each, medians.
set -euo pipefail
FERRY=${FERRY:-target/release/ferry}
AZ=${FERRY_AZURITE:-$(ls "$HOME"/.cache/ferry/azurite-*/node_modules/.bin/azurite-blob | tail -1)}
W=${TMPDIR:-/tmp}/ferry-azure-bench; rm -rf $W; mkdir -p $W/small
$AZ --blobHost 127.0.0.1 --blobPort 0 --inMemoryPersistence --skipApiVersionCheck --disableTelemetry --loose >$W/az.log 2>&1 &
AZPID=$!; trap 'kill $AZPID; rm -rf $W' EXIT
for i in $(seq 50); do grep -q "successfully listens" $W/az.log && break; sleep 0.2; done
PORT=$(grep -o "127.0.0.1:[0-9]*" $W/az.log | tail -1 | cut -d: -f2)
KEY="Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
EP="http://127.0.0.1:$PORT/devstoreaccount1"
export AZURE_STORAGE_CONNECTION_STRING="DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=$KEY;BlobEndpoint=$EP;"
head -c $((256<<20)) /dev/urandom >$W/big.bin
for i in $(seq 500); do head -c 16384 /dev/urandom >$W/small/f$i; done
$FERRY -q mb az://bench
# A container SAS (read, add, create, write, delete, list) for rclone's sas_url.
HEXKEY=$(echo "$KEY" | base64 -d | od -An -tx1 | tr -d ' \n')
SIG=$(printf 'racwdl\n\n2099-01-01T00:00:00Z\n/blob/devstoreaccount1/bench\n\n\n\n2023-11-03\nc\n\n\n\n\n\n\n' | openssl dgst -sha256 -mac HMAC -macopt hexkey:$HEXKEY -binary | base64 | sed 's/+/%2B/g; s/\//%2F/g; s/=/%3D/g')
export RCLONE_CONFIG_AZ_TYPE=azureblob RCLONE_CONFIG=/nonexistent
export RCLONE_CONFIG_AZ_SAS_URL="$EP/bench?sv=2023-11-03&se=2099-01-01T00%3A00%3A00Z&sr=c&sp=racwdl&sig=$SIG"
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
row() { # name, then three timings
    local n=$1; shift; printf '%-28s %6.2f s  (runs: %s)\n' "$n" "$(med "$@")" "$*"; }
for tool in ferry rclone; do
    up=(); down=(); sup=(); sdown=()
    for r in 1 2 3; do
        rm -rf $W/out $W/outsmall
        if [[ $tool == ferry ]]; then
            up+=($(t $FERRY -q cp $W/big.bin az://bench/$tool/big.bin))
            down+=($(t $FERRY -q cp az://bench/$tool/big.bin $W/out/big.bin))
            sup+=($(t $FERRY -q cp --recursive $W/small/ az://bench/$tool/small/))
            sdown+=($(t $FERRY -q cp --recursive az://bench/$tool/small/ $W/outsmall/))
        else
            up+=($(t rclone --ignore-times copyto $W/big.bin az:bench/$tool/big.bin))
            down+=($(t rclone --ignore-times copyto az:bench/$tool/big.bin $W/out/big.bin))
            sup+=($(t rclone --ignore-times copy --transfers 64 $W/small az:bench/$tool/small))
            sdown+=($(t rclone --ignore-times copy --transfers 64 az:bench/$tool/small $W/outsmall))
        fi
        cmp $W/big.bin $W/out/big.bin
        [[ $(ls $W/outsmall | wc -l) == 500 ]]
    done
    row "$tool 256 MiB up" "${up[@]}"; row "$tool 256 MiB down" "${down[@]}"
    row "$tool 500 x 16 KiB up" "${sup[@]}"; row "$tool 500 x 16 KiB down" "${sdown[@]}"
done
