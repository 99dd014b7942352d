#!/bin/bash
# As tensorflow/serving's entrypoint: one model from MODEL_NAME under MODEL_BASE_PATH, plus any flags.
exec /usr/bin/tensorflow_model_server --port=8500 --rest_api_port=8501 \
  --model_name="${MODEL_NAME}" --model_base_path="${MODEL_BASE_PATH}/${MODEL_NAME}" "$@"
