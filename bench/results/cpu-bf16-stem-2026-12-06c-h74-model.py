import numpy as np, onnx
from onnx import helper, numpy_helper, TensorProto
rng=np.random.default_rng(1)
W=(rng.standard_normal((64,3,7,7))*np.sqrt(2/147)).astype(np.float32)
B=(rng.standard_normal(64)*0.1).astype(np.float32)
W2=(rng.standard_normal((64,64,1,1))*np.sqrt(2/64)).astype(np.float32)
nodes=[helper.make_node("Conv",["x","W","B"],["c"],kernel_shape=[7,7],strides=[2,2],pads=[3,3,3,3]),
 helper.make_node("Relu",["c"],["r"]),
 helper.make_node("MaxPool",["r"],["p"],kernel_shape=[3,3],strides=[2,2],pads=[1,1,1,1]),
 helper.make_node("Conv",["p","W2"],["y"],kernel_shape=[1,1])]
g=helper.make_graph(nodes,"stem",[helper.make_tensor_value_info("x",TensorProto.FLOAT,[1,3,224,224])],
 [helper.make_tensor_value_info("y",TensorProto.FLOAT,[1,64,56,56])],[numpy_helper.from_array(W,"W"),numpy_helper.from_array(B,"B"),numpy_helper.from_array(W2,"W2")])
m=helper.make_model(g,opset_imports=[helper.make_opsetid("",17)]); m.ir_version=8
onnx.save(m,"stem.onnx")
