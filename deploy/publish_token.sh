#!/bin/bash
# deploy/publish_token.sh: puts this lab's JupyterLab token into its SSM parameter when the parameter
# holds anything else. bootstrap.sh runs it when JupyterLab first answers, and the timer
# workshop-token runs it every 5 minutes after, as root, from the root-owned copy of the commit: a
# stack update that touched the parameter wrote its placeholder back, and the learner's LabNNOpen
# prints the live token again within minutes (docs/workshop-stack.md). The lab role may read and
# write this one parameter. Environment: JUPYTER_TOKEN, LAB_TOKEN_PARAMETER, LAB_REGION; `aws` on PATH.
set -euo pipefail
: "${JUPYTER_TOKEN:?}" "${LAB_TOKEN_PARAMETER:?}" "${LAB_REGION:?}"
published=$(aws ssm get-parameter --region "$LAB_REGION" --name "$LAB_TOKEN_PARAMETER" \
    --query Parameter.Value --output text)
[ "$published" = "$JUPYTER_TOKEN" ] && exit 0
# A String: CloudFormation makes no SecureString (the stack made the parameter).
aws ssm put-parameter --region "$LAB_REGION" --name "$LAB_TOKEN_PARAMETER" \
    --type String --overwrite --value "$JUPYTER_TOKEN" > /dev/null
echo "workshop lab: token written to SSM parameter $LAB_TOKEN_PARAMETER"
